// `spillway train`: runs a job file to the end, printing progress and writing report.json
// and checkpoints under output.dir.
#pragma once

#include <string>
#include <vector>

#include "kernels/status.hpp"
#include "runtime/job_config.hpp"
#include "runtime/trainer.hpp"

namespace spw {

struct TrainCommand {
  std::string config_path;
  std::vector<std::string> overrides;  // --set section.key=value
  std::string resume_from;             // --resume CHECKPOINT
};

// The trainer's settings for a checked job.
Result<TrainSettings> train_settings_from(const JobConfig& job);
ModelSpec model_spec_from(const ModelConfig& model);

Status run_train_command(const TrainCommand& command);

}  // namespace spw
