// The rate the capacity tier gave a set of copies that may overlap in time: the copies of the
// ranks of one node, whose engines share its storage device. Their bytes over the time at
// least one copy ran (the union of their intervals) is the figure to set beside the device's
// sequential rate; a per-engine rate (bytes over each engine's own copy time) halves when two
// engines share the device, though the device is as busy as with one.
#pragma once

#include <cstdint>
#include <vector>

#include "offload/engine.hpp"

namespace spw::offload {

struct CombinedRate {
  std::uint64_t bytes = 0;
  double busy_s = 0;  // the length of the union of the copies' intervals
  double gb_per_s() const { return busy_s > 0 ? static_cast<double>(bytes) / busy_s / 1e9 : 0; }
};

// Intervals with end < start count as empty. Any order.
CombinedRate combined_rate(std::vector<EngineTransfer> transfers);

}  // namespace spw::offload
