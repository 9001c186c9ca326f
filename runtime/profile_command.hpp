// `spillway profile CONFIG`: measures the job's model on this node with the job's threads
// and microbatch size, and writes profile.json for the planner (and for people).
#pragma once

#include <string>
#include <vector>

#include "kernels/status.hpp"

namespace spw {

struct ProfileCommand {
  std::string config_path;
  std::vector<std::string> overrides;  // --set section.key=value
  std::string output_path;             // empty: output.dir/profile.json
  int repeats = 5;
};

Status run_profile_command(const ProfileCommand& command);

}  // namespace spw
