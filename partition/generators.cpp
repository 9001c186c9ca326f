// Generators by name, so a job file or the CLI can pick a schedule with a string.
#include "partition/generators.hpp"

namespace spw::sched {

namespace {

struct Entry {
  const char* name;
  Result<Schedule> (*make)(const ScheduleShape&);
};

constexpr Entry kGenerators[] = {
    {"gpipe", make_gpipe},
    {"1f1b", make_1f1b},
    {"interleaved-1f1b", make_interleaved_1f1b},
    {"zb-h1", make_zb_h1},
    {"pipefb", make_pipefb},
};

}  // namespace

Result<Schedule> make_schedule(std::string_view name, const ScheduleShape& shape) {
  for (const Entry& entry : kGenerators)
    if (name == entry.name) return entry.make(shape);
  std::string known;
  for (const Entry& entry : kGenerators)
    known += (known.empty() ? "" : ", ") + std::string(entry.name);
  return error(StatusCode::not_found,
               "unknown schedule '" + std::string(name) + "' (known: " + known + ")");
}

std::vector<std::string> schedule_names() {
  std::vector<std::string> names;
  for (const Entry& entry : kGenerators) names.emplace_back(entry.name);
  return names;
}

}  // namespace spw::sched
