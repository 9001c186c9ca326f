// `spillway evaluate`: the loss of a checkpoint on the job's held-out data (eval.batches
// batches, as `spillway train` measures every eval.every steps), without training. For
// comparing checkpoints of one run, or runs on the same data, after the fact.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "kernels/status.hpp"
#include "runtime/train_command.hpp"

namespace spw {

struct EvaluateCommand {
  std::string config_path;
  std::vector<std::string> overrides;  // --set section.key=value
  std::string checkpoint;              // --checkpoint: whose parameters are evaluated
  int batches = 0;                     // --batches; 0: the job's eval.batches
  std::string output_path;             // --output; empty: output.dir/eval.json
};

// Collective over `comm`. Lays the job out as `spillway train` would on these ranks (the
// single-rank trainer, or the pipeline with its planner), loads the checkpoint's parameters
// (train.init_from), evaluates, prints the loss on rank 0 and writes it with the checkpoint's
// step to output_path (atomically). Errors before the evaluation are agreed (scope
// all_ranks); one inside a pipeline's pass is this rank's (scope this_rank).
Status run_evaluate_command(const EvaluateCommand& command, MPI_Comm comm, FailureScope& scope);

}  // namespace spw
