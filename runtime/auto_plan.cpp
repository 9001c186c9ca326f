#include "runtime/auto_plan.hpp"

#include <nlohmann/json.hpp>

#include "partition/planner.hpp"
#include "runtime/mpi_support.hpp"
#include "runtime/profiler.hpp"
#include "runtime/rank_links.hpp"

namespace spw {
namespace {

OffloadTier runtime_tier(sched::OffloadTier tier) {
  switch (tier) {
    case sched::OffloadTier::none: return OffloadTier::none;
    case sched::OffloadTier::file: return OffloadTier::file;
    case sched::OffloadTier::peer: return OffloadTier::peer;
    case sched::OffloadTier::host: return OffloadTier::host;
  }
  return OffloadTier::none;
}

sched::LayoutChoice layout_choice(Layout layout) {
  switch (layout) {
    case Layout::automatic: return sched::LayoutChoice::automatic;
    case Layout::classic: return sched::LayoutChoice::classic;
    case Layout::pipefb: return sched::LayoutChoice::pipefb;
  }
  return sched::LayoutChoice::automatic;
}

nlohmann::json plan_to_json(const sched::Plan& plan) {
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& range : plan.stages) stages.push_back({range.first, range.last});
  const nlohmann::json offload = {
      {"tier", std::string(to_string(runtime_tier(plan.offload.tier)))},
      {"keep", plan.offload.keep},
      {"lookahead", plan.offload.lookahead},
      {"transfer_s", plan.offload_transfer_s},
      {"exposed_s", plan.offload_exposed_s}};
  return {{"schedule", plan.schedule},
          {"pipeline_ranks", plan.pipeline_ranks},
          {"replicas", plan.replicas},
          {"chunks", plan.chunks},
          {"microbatches", plan.microbatches},
          {"microbatch_samples", plan.microbatch_samples},
          {"stages", stages},
          {"world_rank", plan.world_rank},
          {"iteration_s", plan.iteration_s},
          {"offload", offload},
          {"explanation", plan.explanation}};
}

AutoPlan plan_from_json(const nlohmann::json& j) {
  AutoPlan plan;
  PipelineLayout& l = plan.layout;
  l.schedule = j.at("schedule").get<std::string>();
  l.pipeline_ranks = j.at("pipeline_ranks").get<int>();
  l.ranks_per_stage = l.schedule == "pipefb" ? 2 : 1;
  l.replicas = j.at("replicas").get<int>();
  l.chunks = j.at("chunks").get<int>();
  l.microbatches = j.at("microbatches").get<int>();
  l.microbatch_samples = j.at("microbatch_samples").get<std::int64_t>();
  for (const auto& range : j.at("stages")) {
    l.stages.push_back({range.at(0).get<int>(), range.at(1).get<int>()});
  }
  plan.world_rank = j.at("world_rank").get<std::vector<int>>();
  plan.predicted_iteration_s = j.at("iteration_s").get<double>();
  plan.explanation = j.at("explanation").get<std::string>();
  const nlohmann::json& offload = j.at("offload");
  const std::string tier = offload.at("tier").get<std::string>();
  for (OffloadTier t : {OffloadTier::none, OffloadTier::file, OffloadTier::peer, OffloadTier::host})
    if (to_string(t) == tier) plan.offload_tier = t;
  plan.offload_keep = offload.at("keep").get<int>();
  plan.offload_lookahead = offload.at("lookahead").get<int>();
  return plan;
}

// Rank 0's part: profile, plan, describe.
Result<nlohmann::json> plan_on_rank_zero(const TrainSettings& settings,
                                         const sched::RankTopology& topology,
                                         const std::string& output_dir) {
  ProfileOptions options;
  options.microbatch_samples = std::max<std::int64_t>(1, settings.batch / settings.microbatches);
  SPW_ASSIGN_OR_RETURN(sched::ModelProfile profile, profile_model(settings, options));
  if (!output_dir.empty()) SPW_TRY(sched::write_profile(output_dir + "/profile.json", profile));
  sched::PlanRequest request;
  request.profile = profile;
  request.topology = topology;
  request.global_batch = settings.batch;
  if (settings.memory_cap) {
    request.memory_cap_bytes = static_cast<std::int64_t>(*settings.memory_cap);
  }
  request.layout = layout_choice(settings.layout);
  request.offload.choose = settings.plan_offload;
  SPW_ASSIGN_OR_RETURN(sched::Plan plan, sched::make_plan(request));
  return plan_to_json(plan);
}

}  // namespace

Result<AutoPlan> plan_automatically(const TrainSettings& settings, MPI_Comm comm,
                                    const std::string& output_dir) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  // Links are measured with one activation's worth of bytes: what pipeline stages exchange.
  MicrobatchData mb;
  mb.samples = std::max<std::int64_t>(1, settings.batch / settings.microbatches);
  mb.seq = settings.model.positions_per_sample();
  const std::int64_t activation =
      std::max<std::int64_t>(8, settings.model.activation_shape(0, mb).numel() * 4);
  SPW_ASSIGN_OR_RETURN(sched::RankTopology topology,
                       cached_rank_topology(comm, output_dir, activation));

  std::string text;
  Status planned = Status::success();
  if (rank == 0) {
    auto plan = plan_on_rank_zero(settings, topology, output_dir);
    planned = plan.status();
    if (plan.ok()) text = plan->dump();
  }
  SPW_TRY(agree_on_status(comm, planned.with_context("planning the pipeline")));
  int length = static_cast<int>(text.size());
  SPW_TRY(mpi_check(MPI_Bcast(&length, 1, MPI_INT, 0, comm), "sharing the plan"));
  text.resize(static_cast<std::size_t>(length));
  SPW_TRY(mpi_check(MPI_Bcast(text.data(), length, MPI_CHAR, 0, comm), "sharing the plan"));
  return plan_from_json(nlohmann::json::parse(text));
}

Result<MPI_Comm> communicator_in_plan_order(MPI_Comm comm, const std::vector<int>& world_rank) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  int position = -1;
  for (std::size_t i = 0; i < world_rank.size(); ++i) {
    if (world_rank[i] == rank) position = static_cast<int>(i);
  }
  if (position < 0) {
    return error(StatusCode::internal,
                 "the plan gives rank " + std::to_string(rank) + " no place in the pipeline");
  }
  MPI_Comm ordered = MPI_COMM_NULL;
  SPW_TRY(mpi_check(MPI_Comm_split(comm, 0, position, &ordered), "ordering ranks by the plan"));
  return ordered;
}

}  // namespace spw
