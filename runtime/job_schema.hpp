// The keys a job file may set, and the nearest known key to one it may not: a typo gets a
// "did you mean" instead of a bare refusal.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace spw::job_detail {

struct SectionSchema {
  std::string_view name;
  std::vector<std::string_view> keys;
};

const std::vector<SectionSchema>& schema();

// The model keys that only a gpt has.
inline constexpr std::string_view kGptOnlyKeys[] = {
    "layers", "d_model", "heads", "seq", "vocab", "ln_eps", "head_chunk_rows", "split_layers"};

// nullptr for a section the schema does not have.
const SectionSchema* find_section(std::string_view name);
bool is_known(std::string_view section, std::string_view key);

// The known section closest to `typed`, "" when none is close.
std::string nearest_section(std::string_view typed);
// "section.key" of the known key closest to `section`.`key`, "" when none is close.
std::string nearest_key(std::string_view section, std::string_view key);
// " (did you mean 'x'?)", or "" when nothing is close.
std::string did_you_mean(const std::string& candidate);

}  // namespace spw::job_detail
