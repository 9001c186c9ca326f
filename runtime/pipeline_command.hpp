// The multi-rank half of `spillway train`.
#pragma once

#include <mpi.h>

#include "kernels/status.hpp"
#include "runtime/job_config.hpp"
#include "runtime/train_command.hpp"

namespace spw {

// Collective over `comm`. Errors before training are agreed (scope all_ranks: every rank
// returns the same one); errors after are this rank's own (scope this_rank), and then the
// executor is left alive: the caller must end the job (MPI_Abort), as its peers may be waiting.
Result<RunEnd> run_pipeline_job(const JobConfig& job, const TrainCommand& command, MPI_Comm comm,
                                FailureScope& scope);

}  // namespace spw
