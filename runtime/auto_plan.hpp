// parallel.stages = "auto": measure, then let the planner decide. Every rank profiles the
// model at once (the load training puts on the node; rank 0 keeps the medians), all ranks
// measure their links (cached in output.dir), rank 0 plans and every rank receives the same
// plan. The planner chooses the stages and their block ranges, the replicas, chunks,
// microbatches per replica and the schedule, PipeFB included unless parallel.layout =
// "classic" (only PipeFB with "pipefb"), and with offload.tier = "auto" the offload tier,
// keep and lookahead (file or peer); with "auto" those job keys are its to choose, and the
// batch, the model and memory.cap are what it must respect. A job that fixes its tier (file
// or peer) has every plan priced with that tier, keep and lookahead. Where the file tier may
// be used, every rank first measures its rate in offload.dir (all at once, as they will
// offload) and the plan prices file copies at the median.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kernels/status.hpp"
#include "partition/planner.hpp"
#include "runtime/job_config.hpp"
#include "runtime/pipeline_layout.hpp"
#include "runtime/trainer.hpp"

namespace spw {

struct AutoPlan {
  PipelineLayout layout;
  // With model.split_layers = "auto": the layers the plan cuts at its stage boundaries, which
  // the run's model must split so (the layout's stages count their blocks); empty otherwise.
  std::vector<LayerSplit> splits;
  // With model.head_chunk_rows = "auto": the rows a chunk of the head the plan was made for
  // (0: whole), which the run's model must use; unset otherwise.
  std::optional<std::int64_t> head_chunk_rows;
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
// to `output_dir` when it is not empty; the link matrix is cached there. `planned_for`, unless
// null, is kept in the plan's record as "planned_for": the job keys it was made for
// (runtime/stored_plan.hpp), by which a resumed run knows the plan is still its own.
Result<AutoPlan> plan_automatically(const TrainSettings& settings, MPI_Comm comm,
                                    const std::string& output_dir,
                                    const nlohmann::json& planned_for = nullptr);

// Collective over `comm`: the same measurements, but no search: the planner's cost model
// predicts `layout` with `offload` as it will run (ranks in order), so a run with a forced
// layout still records a prediction to compare with what it measures.
Result<AutoPlan> predict_requested_layout(const TrainSettings& settings,
                                          const PipelineLayout& layout,
                                          const OffloadConfig& offload, MPI_Comm comm,
                                          const std::string& output_dir);

// A plan as plan_record wrote it (plan.json, or rank 0's plan shared as text) read back.
// Throws nlohmann::json's exceptions on a record that lacks a key or has one of another type.
AutoPlan plan_from_record(const nlohmann::json& record);

struct FileTierRate {
  sched::OffloadBandwidth bandwidth;  // the planner's default where not measured
  std::string source;                 // for the plan record; empty when not measured
};

// The file tier's storage rate for plans of a job whose offload is `offload`: nothing unless
// its tier is file or auto. Collective over `comm`: every rank stores and loads 3 x 16 MiB in
// offload.dir at once, as they will offload at once (the ranks of a node share its storage),
// and all get the median of their round-trip rates. The probe's failure on any rank (a
// missing or unwritable directory) fails every rank with its message.
Result<FileTierRate> measure_file_tier_rate(const OffloadConfig& offload, MPI_Comm comm);

// Whether the ranks' offload engines will take turns with compute, as the executor places
// them (offload/engine_placement.hpp) on rank 0's node: no core is spare once every rank
// there has its `threads` compute threads, or the engine is left unbound (offload.engine_pu
// = "none"). False when the node's core count is unknown.
bool offload_copies_take_compute(const sched::RankTopology& topology, int threads,
                                 const OffloadConfig& offload);

// How a plan prices copies: at `rate`, taking turns with compute where
// offload_copies_take_compute says so for `profile`'s threads.
sched::OffloadBandwidth offload_pricing(const FileTierRate& rate,
                                        const sched::RankTopology& topology,
                                        const sched::ModelProfile& profile,
                                        const OffloadConfig& offload);

// The planner's question for this job: its global batch and memory.cap, the job's offload
// tier when it fixes one (file or peer, with its keep and lookahead), and the file tier's
// storage rate.
sched::PlanRequest plan_request(const TrainSettings& settings, sched::ModelProfile profile,
                                sched::RankTopology topology,
                                const sched::OffloadBandwidth& bandwidth = {});

// `layout` with the job's `offload` on the topology's ranks in order, simulated with the
// planner's cost model and described like a plan (with the node-memory warning when
// `settings` sets no cap).
Result<sched::Plan> predict_layout(const TrainSettings& settings,
                                   const sched::ModelProfile& profile,
                                   const sched::RankTopology& topology,
                                   const PipelineLayout& layout, const OffloadConfig& offload,
                                   const sched::OffloadBandwidth& bandwidth = {});

// model.split_layers = "auto" (settings.split_layers_auto) on a gpt of at least 3 layers
// and 2 heads: the planner may cut layers at its stage boundaries. It learns what a cut
// costs from the profile of a probe model, the job's with layer 0 cut after its first head
// and layer 1 after all but its last (partition/planner_layer_split.hpp).
bool plans_layer_cuts(const TrainSettings& settings);
// The model a plan's profile is measured on: the probe where plans_layer_cuts, else the job's.
ModelSpec profiled_model(const TrainSettings& settings);

struct ModelPlan {
  sched::Plan plan;
  sched::ModelProfile profile;     // the blocks plan.stages count
  std::vector<LayerSplit> splits;  // the cuts the plan keeps (model.splits of the run)
  std::int64_t head_chunk_rows = 0;  // the run's model.gpt.head_chunk_rows (head_choice.hpp)
};

// make_plan on `measured` (a profile of profiled_model(settings)) and, where
// plans_layer_cuts, the cuts at its stage boundaries that shorten the predicted iteration.
Result<ModelPlan> plan_model(const TrainSettings& settings, const sched::ModelProfile& measured,
                             const sched::RankTopology& topology,
                             const sched::OffloadBandwidth& bandwidth);

// Writes `splits` as the record's layout.split_layers ([layer, front heads] pairs), which
// plan_from_record reads back into AutoPlan::splits; nothing when empty.
void record_layer_cuts(nlohmann::json& record, const std::vector<LayerSplit>& splits);

// The microbatch the job's file asks for (train.batch / train.microbatches): what profiles
// are measured with.
std::int64_t job_microbatch_samples(const TrainSettings& settings);

// A communicator over the same ranks in plan order, so rank = replica * P + pipeline rank
// as the executor expects. Collective; the caller frees it.
Result<MPI_Comm> communicator_in_plan_order(MPI_Comm comm, const std::vector<int>& world_rank);

}  // namespace spw
