// `spillway train`: runs a job file to the end, printing progress and writing report.json
// and checkpoints under output.dir.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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

enum class RunEnd {
  completed,  // every step of the job ran
  stopped,    // a stop request (stop_request.hpp) ended it early, after a checkpoint
};

// Runs the job on the ranks of `comm`: the single-rank trainer on one rank with one chunk,
// the pipeline executor otherwise. Collective. A stop request ends the run at the next step
// boundary (every rank at the same step) with a checkpoint and the report, which says so.
Result<RunEnd> run_train_command(const TrainCommand& command, MPI_Comm comm,
                                 FailureScope& scope);

// ---- shared by the single-rank and the pipeline run --------------------------------------

// Where the checkpoint after `step` goes.
std::string checkpoint_path(const JobConfig& job, std::int64_t step);

// A run a stop request ended: why, after which step, and the checkpoint to resume from.
struct EarlyStop {
  int signal_number = 0;
  std::int64_t step = 0;
  std::int64_t total = 0;
  std::string checkpoint;
};

// report.json's "stopped".
nlohmann::json to_json(const EarlyStop& stop);

// What `spillway train` prints: where it stopped and how to resume.
std::string describe(const EarlyStop& stop, const TrainCommand& command);

}  // namespace spw
