// parallel.stages = "auto": measure, then let the planner decide. Every rank profiles the
// model at once (the load training puts on the node; rank 0 keeps the medians), all ranks
// measure their links (cached in output.dir), rank 0 plans and every rank receives the same
// plan. The planner chooses the stages and their block ranges, the replicas, chunks,
// microbatches per replica and the schedule, PipeFB included unless parallel.layout =
// "classic" (only PipeFB with "pipefb"), and with offload.tier = "auto" the offload tier,
// keep and lookahead (file or peer; the file tier is priced at the planner's default storage
// bandwidth, 1 GB/s); with "auto" those job keys are its to choose, and the batch, the model
// and memory.cap are what it must respect.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/status.hpp"
#include "partition/planner.hpp"
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
  nlohmann::json record;  // plan_record (runtime/plan_record.hpp)
};

// Collective over `comm`. Rank 0 writes the profile and the plan (profile.json, plan.json)
// to `output_dir` when it is not empty; the link matrix is cached there.
Result<AutoPlan> plan_automatically(const TrainSettings& settings, MPI_Comm comm,
                                    const std::string& output_dir);

// Collective over `comm`: the same measurements, but no search: the planner's cost model
// predicts `layout` with `offload` as it will run (ranks in order), so a run with a forced
// layout still records a prediction to compare with what it measures.
Result<AutoPlan> predict_requested_layout(const TrainSettings& settings,
                                          const PipelineLayout& layout,
                                          const OffloadConfig& offload, MPI_Comm comm,
                                          const std::string& output_dir);

// The planner's question for this job: its global batch and memory.cap.
sched::PlanRequest plan_request(const TrainSettings& settings, sched::ModelProfile profile,
                                sched::RankTopology topology);

// `layout` with the job's `offload` on the topology's ranks in order, simulated with the
// planner's cost model and described like a plan (with the node-memory warning when
// `settings` sets no cap).
Result<sched::Plan> predict_layout(const TrainSettings& settings,
                                   const sched::ModelProfile& profile,
                                   const sched::RankTopology& topology,
                                   const PipelineLayout& layout, const OffloadConfig& offload);

// The microbatch the job's file asks for (train.batch / train.microbatches): what profiles
// are measured with.
std::int64_t job_microbatch_samples(const TrainSettings& settings);

// A communicator over the same ranks in plan order, so rank = replica * P + pipeline rank
// as the executor expects. Collective; the caller frees it.
Result<MPI_Comm> communicator_in_plan_order(MPI_Comm comm, const std::vector<int>& world_rank);

}  // namespace spw
