// What a block of rank memory is for. The ledger accounts bytes per category so that a report
// can say what dominates a rank's peak, and the planner can budget each one.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace spw {

enum class MemoryCategory : int {
  parameters = 0,
  gradients,
  optimizer_state,
  stash,            // activations kept from a forward for its backward
  workspace,        // short-lived buffers inside one instruction
  communication,    // send and receive buffers
  offload_staging,  // aligned bounce buffers of the offload engine
};

inline constexpr std::size_t kMemoryCategoryCount = 7;

inline constexpr std::array<MemoryCategory, kMemoryCategoryCount> kAllMemoryCategories = {
    MemoryCategory::parameters, MemoryCategory::gradients,     MemoryCategory::optimizer_state,
    MemoryCategory::stash,      MemoryCategory::workspace,     MemoryCategory::communication,
    MemoryCategory::offload_staging};

// snake_case names, as they appear in report.json and in error messages.
constexpr std::string_view memory_category_name(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::parameters: return "parameters";
    case MemoryCategory::gradients: return "gradients";
    case MemoryCategory::optimizer_state: return "optimizer_state";
    case MemoryCategory::stash: return "stash";
    case MemoryCategory::workspace: return "workspace";
    case MemoryCategory::communication: return "communication";
    case MemoryCategory::offload_staging: return "offload_staging";
  }
  return "unknown";
}

std::optional<MemoryCategory> memory_category_from_name(std::string_view name);

}  // namespace spw
