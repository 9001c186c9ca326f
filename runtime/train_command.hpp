// `spillway train`: runs a job file to the end, printing progress and writing report.json
// and checkpoints under output.dir.
#pragma once

#include <mpi.h>

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
  // --predict: with a forced layout, also profile and measure links as stages = "auto" does,
  // and record the planner's prediction for the layout in report.json.
  bool predict = false;
};

// The trainer's settings for a checked job.
Result<TrainSettings> train_settings_from(const JobConfig& job);
ModelSpec model_spec_from(const ModelConfig& model);

// Who knows about a failure: every rank (the same error, agreed before any training; rank 0
// reports it and every rank exits) or only the rank that failed mid-run, whose peers may be
// blocked waiting on it, so the driver must end the whole job (MPI_Abort).
enum class FailureScope { all_ranks, this_rank };

// Runs the job on the ranks of `comm`: the single-rank trainer on one rank with one chunk,
// the pipeline executor otherwise. Collective.
Status run_train_command(const TrainCommand& command, MPI_Comm comm, FailureScope& scope);

}  // namespace spw
