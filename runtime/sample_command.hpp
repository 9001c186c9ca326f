// `spillway sample`: text from a checkpoint of a byte-level GPT, to see what it learned.
#pragma once

#include <string>
#include <vector>

#include "kernels/status.hpp"
#include "runtime/sampler.hpp"

namespace spw {

struct SampleCommand {
  std::string config_path;
  std::vector<std::string> overrides;  // --set section.key=value
  std::string checkpoint;              // --checkpoint: the parameters to sample from
  SampleSettings settings;
};

// One process: builds the job's model on one rank with the checkpoint's parameters
// (train.init_from) and prints the prompt and its continuation to stdout.
Status run_sample_command(const SampleCommand& command);

}  // namespace spw
