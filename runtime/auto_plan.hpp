// parallel.stages = "auto": measure, then let the planner decide. Rank 0 profiles the model
// on its node, all ranks measure their links (cached in output.dir), rank 0 plans and every
// rank receives the same plan. The planner chooses the stages and their block ranges, the
// replicas, chunks, microbatches per replica and the schedule, PipeFB included unless
// parallel.layout = "classic" (only PipeFB with "pipefb"), and with offload.tier = "auto"
// the offload tier, keep and lookahead (file or peer; the file tier is priced at the
// planner's default storage bandwidth, 1 GB/s); with "auto" those job keys are its to
// choose, and the batch, the model and memory.cap are what it must respect.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "kernels/status.hpp"
#include "runtime/job_config.hpp"
#include "runtime/pipeline_layout.hpp"
#include "runtime/trainer.hpp"

namespace spw {

struct AutoPlan {
  PipelineLayout layout;
  // [replica * ranks_in_pipeline() + pipeline rank] -> the rank of the caller's
  // communicator that runs it.
  std::vector<int> world_rank;
  double predicted_iteration_s = 0;
  std::string explanation;
  // The offload the plan needs (tier none when it fits without); chosen only when the
  // settings ask the planner to (offload.tier = "auto").
  OffloadTier offload_tier = OffloadTier::none;
  int offload_keep = 0;
  int offload_lookahead = 0;
};

// Collective over `comm`. `profile_path` (may be empty) names where rank 0 writes the
// profile it measured, beside the run's other outputs.
Result<AutoPlan> plan_automatically(const TrainSettings& settings, MPI_Comm comm,
                                    const std::string& output_dir);

// A communicator over the same ranks in plan order, so rank = replica * P + pipeline rank
// as the executor expects. Collective; the caller frees it.
Result<MPI_Comm> communicator_in_plan_order(MPI_Comm comm, const std::vector<int>& world_rank);

}  // namespace spw
