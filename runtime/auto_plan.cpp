#include "runtime/auto_plan.hpp"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "offload/file_rate.hpp"
#include "partition/plan_memory_hint.hpp"
#include "partition/planner_layer_split.hpp"
#include "runtime/head_choice.hpp"
#include "runtime/json_file.hpp"
#include "runtime/mpi_support.hpp"
#include "runtime/node_memory_budget.hpp"
#include "runtime/plan_record.hpp"
#include "runtime/profile_on_ranks.hpp"
#include "runtime/rank_links.hpp"

namespace spw {
namespace {

sched::LayoutChoice layout_choice(Layout layout) {
  switch (layout) {
    case Layout::automatic: return sched::LayoutChoice::automatic;
    case Layout::classic: return sched::LayoutChoice::classic;
    case Layout::pipefb: return sched::LayoutChoice::pipefb;
  }
  return sched::LayoutChoice::automatic;
}

// What the file tier's rate is measured with: stash-sized writes (a gpt-s stage's stash is
// 4-13 MiB), three of them for a median, under a second at 100 MB/s.
constexpr std::size_t kFileProbeBytes = std::size_t{16} << 20;
constexpr int kFileProbeRepeats = 3;

bool may_use_file_tier(OffloadTier tier) {
  return tier == OffloadTier::file || tier == OffloadTier::automatic;
}

}  // namespace

AutoPlan plan_from_record(const nlohmann::json& record) {
  AutoPlan plan;
  const nlohmann::json& j = record.at("layout");
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
  if (j.contains("split_layers")) {
    for (const auto& cut : j.at("split_layers")) {
      plan.splits.push_back({cut.at(0).get<std::int64_t>(), cut.at(1).get<std::int64_t>()});
    }
  }
  if (j.contains("head_chunk_rows"))
    plan.head_chunk_rows = j.at("head_chunk_rows").get<std::int64_t>();
  plan.predicted_iteration_s = record.at("predicted").at("iteration_seconds").get<double>();
  plan.explanation = record.at("explanation").get<std::string>();
  const nlohmann::json& offload = j.at("offload");
  const std::string tier = offload.at("tier").get<std::string>();
  for (OffloadTier t : {OffloadTier::none, OffloadTier::file, OffloadTier::peer, OffloadTier::host})
    if (to_string(t) == tier) plan.offload_tier = t;
  plan.offload_keep = offload.at("keep").get<int>();
  plan.offload_lookahead = offload.at("lookahead").get<int>();
  plan.record = record;
  return plan;
}

Result<FileTierRate> measure_file_tier_rate(const OffloadConfig& offload, MPI_Comm comm) {
  FileTierRate out;
  if (!may_use_file_tier(offload.tier)) return out;
  SPW_TRY(mpi_check(MPI_Barrier(comm), "starting the file tier's rate probe"));
  Result<offload::FileRate> mine =
      offload::measure_file_rate(offload.dir, kFileProbeBytes, kFileProbeRepeats);
  SPW_TRY(agree_on_status(comm, mine.status()));
  int size = 1;
  SPW_TRY(mpi_check(MPI_Comm_size(comm, &size), "reading the job's size"));
  std::vector<double> rates(static_cast<std::size_t>(size));
  SPW_TRY(mpi_check(MPI_Allgather(&mine->bytes_per_s, 1, MPI_DOUBLE, rates.data(), 1, MPI_DOUBLE,
                                  comm),
                    "sharing the file tier's rates"));
  std::sort(rates.begin(), rates.end());
  const double median = rates[(rates.size() - 1) / 2];  // of an even count, the slower middle
  out.bandwidth.file_bytes_per_s = median;
  char text[320];
  std::snprintf(text, sizeof text,
                "%.0f MB/s each way (round trip, median of %d rank(s) writing at once, %s; "
                "here: store %.0f MB/s, load %.0f MB/s), %d x %zu MiB in %s",
                median / 1e6, size, mine->direct_io ? "O_DIRECT" : "through the page cache",
                mine->store_bytes_per_s / 1e6, mine->load_bytes_per_s / 1e6, kFileProbeRepeats,
                kFileProbeBytes >> 20, mine->directory.c_str());
  out.source = text;
  return out;
}

bool offload_copies_take_compute(const sched::RankTopology& topology, int threads,
                                 const OffloadConfig& offload) {
  if (offload.engine_pu == kEnginePuNone) return true;
  if (topology.nodes.empty() || topology.node_of.empty()) return false;
  const int node = topology.node_of[0];
  const int cores = topology.nodes[static_cast<std::size_t>(node)].cores;
  return cores > 0 && topology.ranks_on_node(node) * std::max(1, threads) >= cores;
}

sched::OffloadBandwidth offload_pricing(const FileTierRate& rate,
                                        const sched::RankTopology& topology,
                                        const sched::ModelProfile& profile,
                                        const OffloadConfig& offload) {
  sched::OffloadBandwidth pricing = rate.bandwidth;
  pricing.copies_take_compute = offload_copies_take_compute(topology, profile.threads, offload);
  return pricing;
}

namespace {

// Where plans_layer_cuts: the probe's profile read as the job's model (each probed layer as
// the first whole one, which has the same shape), the two cuts' costs, and the layers.
struct ProbeReading {
  sched::ModelProfile whole;
  sched::LayerSplitCosts costs;
  std::vector<std::string> layers;
};

Result<ProbeReading> read_probe(const TrainSettings& settings,
                                const sched::ModelProfile& measured) {
  const int heads = static_cast<int>(settings.model.gpt.heads);
  const std::string template_layer = "blocks." + std::to_string(heads > 2 ? 2 : 1);
  const auto find = [&](const std::string& name) -> const sched::BlockProfile* {
    for (const auto& b : measured.blocks)
      if (b.name == name) return &b;
    return nullptr;
  };
  const sched::BlockProfile* first_front = find("blocks.0.front");
  const sched::BlockProfile* first_back = find("blocks.0.back");
  const sched::BlockProfile* last_front = heads > 2 ? find("blocks.1.front") : first_front;
  const sched::BlockProfile* last_back = heads > 2 ? find("blocks.1.back") : first_back;
  const sched::BlockProfile* whole_layer = find(template_layer);
  if (!first_front || !first_back || !last_front || !last_back || !whole_layer) {
    return error(StatusCode::internal, "the probe profile lacks the blocks of its cut layers");
  }
  ProbeReading out;
  out.costs = {heads, *first_front, *first_back, *last_front, *last_back};
  out.whole = measured;
  out.whole.model = settings.model.describe();
  out.whole.blocks.clear();
  for (const auto& b : measured.blocks) {
    const auto dot = b.name.rfind('.');
    const std::string suffix = dot == std::string::npos ? "" : b.name.substr(dot);
    if (suffix == ".back") continue;
    if (suffix == ".front") {
      sched::BlockProfile layer = *whole_layer;
      layer.name = b.name.substr(0, dot);
      out.whole.blocks.push_back(layer);
    } else {
      out.whole.blocks.push_back(b);
    }
  }
  for (std::int64_t l = 0; l < settings.model.gpt.layers; ++l) {
    out.layers.push_back("blocks." + std::to_string(l));
  }
  return out;
}

// Rank 0's part: keep the profile, plan (or predict `requested`), keep the plan.
Result<nlohmann::json> plan_on_rank_zero(
    const TrainSettings& settings, const sched::ModelProfile& profile,
    const sched::ModelProfile* chunked_head, const sched::RankTopology& topology,
    const std::string& output_dir, const PipelineLayout* requested, const OffloadConfig& offload,
    const FileTierRate& file_rate, const nlohmann::json& planned_for) {
  if (!output_dir.empty()) SPW_TRY(sched::write_profile(output_dir + "/profile.json", profile));
  PlanSources sources;
  sources.how = requested ? "the job's own layout, predicted" : "searched by the planner";
  sources.profile = "measured on all " + std::to_string(topology.ranks) +
                    " ranks at once, the median per block over the ranks, " +
                    std::to_string(profile.threads) + " thread(s) on rank 0";
  sources.links = "measured by ping-pongs between the ranks" +
                  (output_dir.empty() ? std::string()
                                      : ", cached in " + output_dir + "/topology-" +
                                            std::to_string(topology.ranks) + "-*.json");
  sources.offload = offload_pricing(file_rate, topology, profile, offload);
  sources.file_rate = file_rate.source;
  ModelPlan planned;
  if (requested) {
    SPW_ASSIGN_OR_RETURN(planned.plan, predict_layout(settings, profile, topology, *requested,
                                                      offload, sources.offload));
    planned.profile = profile;
  } else {
    SPW_ASSIGN_OR_RETURN(
        planned, plan_model_and_head(settings, profile, chunked_head, topology, sources.offload));
  }
  nlohmann::json record = plan_record(planned.plan, planned.profile, topology, sources);
  record_layer_cuts(record, planned.splits);
  if (requested == nullptr) record_head_chunks(record, settings, planned.head_chunk_rows);
  if (!planned_for.is_null()) record["planned_for"] = planned_for;
  if (!output_dir.empty()) SPW_TRY(write_json_atomically(output_dir + "/plan.json", record));
  return record;
}

// What a rank that only runs forwards holds of each block: no gradients, optimizer state or
// backward buffers.
void forwards_only(sched::ModelProfile& profile) {
  for (sched::BlockProfile& block : profile.blocks) {
    block.gradient_bytes = 0;
    block.optimizer_state_bytes = 0;
    block.backward_bytes = 0;
    block.workspace_bytes = 0;
    block.bounded_workspace_per_sample = 0;
    block.bounded_workspace_most = 0;
  }
}

Result<AutoPlan> measure_and_plan(const TrainSettings& settings, MPI_Comm comm,
                                  const std::string& output_dir, const PipelineLayout* requested,
                                  const OffloadConfig& requested_offload,
                                  const nlohmann::json& planned_for) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  {
    const std::int64_t last = settings.model.block_count() - 1;
    const bool trains = !settings.inference_only;
    SPW_TRY(check_job_holds_model(comm, block_memory(settings.model, 0, last, trains,
                                                     trains ? &settings.optimizer : nullptr)));
  }
  // Without memory.cap the planner plans within each rank's share of its node's memory, so
  // that it picks a layout the node can hold (a pipeline, not replicas of a model that fits
  // the node once). A layout the job gives is predicted as it is.
  TrainSettings planning = settings;
  if (!settings.memory_cap && requested == nullptr) {
    SPW_ASSIGN_OR_RETURN(const std::optional<std::size_t> share, node_memory_share(comm));
    if (share && *share > 0) {
      planning.memory_cap = *share;
      planning.memory_cap_is_node_share = true;
    }
  }
  // Links are measured with one activation's worth of bytes (what pipeline stages exchange),
  // or the probe's minimum if that is more.
  MicrobatchData mb;
  mb.samples = job_microbatch_samples(settings);
  mb.seq = settings.model.positions_per_sample();
  const std::int64_t activation =
      std::max<std::int64_t>(8, settings.model.activation_shape(0, mb).numel() * 4);
  SPW_ASSIGN_OR_RETURN(sched::RankTopology topology,
                       cached_rank_topology(comm, output_dir, activation));
  ProfileOptions options;
  options.microbatch_samples = job_microbatch_samples(settings);
  TrainSettings profiled = settings;
  if (requested == nullptr) profiled.model = profiled_model(settings);
  SPW_ASSIGN_OR_RETURN(sched::ModelProfile profile, profile_on_all_ranks(profiled, options, comm));
  // model.head_chunk_rows = "auto": the head chunked too, on a one-layer probe (every rank
  // alike, so all fail alike).
  std::optional<sched::ModelProfile> chunked_head;
  if (requested == nullptr && plans_head_chunks(settings)) {
    SPW_ASSIGN_OR_RETURN(sched::ModelProfile measured,
                         profile_on_all_ranks(chunked_head_probe(settings), options, comm));
    SPW_ASSIGN_OR_RETURN(chunked_head, with_chunked_head(settings, profile, measured));
  }
  if (settings.inference_only) {
    // Forwards alone hold parameters alone: a layout fits if they and its stashes do. The
    // plan's times still price training, which only orders the layouts that fit.
    forwards_only(profile);
    if (chunked_head) forwards_only(*chunked_head);
  }
  // A forced layout runs with the offload it was given; a planned one with the job's.
  const OffloadConfig& offload = requested ? requested_offload : settings.offload;
  SPW_ASSIGN_OR_RETURN(FileTierRate file_rate, measure_file_tier_rate(offload, comm));

  std::string text;
  Status planned = Status::success();
  if (rank == 0) {
    auto record =
        plan_on_rank_zero(planning, profile, chunked_head ? &*chunked_head : nullptr, topology,
                          output_dir, requested, offload, file_rate, planned_for);
    planned = record.status();
    if (record.ok()) text = record->dump();
  }
  SPW_TRY(agree_on_status(comm, planned.with_context("planning the pipeline")));
  SPW_TRY(broadcast_string(comm, text, "sharing the plan"));
  return plan_from_record(nlohmann::json::parse(text));
}

}  // namespace

void record_layer_cuts(nlohmann::json& record, const std::vector<LayerSplit>& splits) {
  if (splits.empty()) return;
  nlohmann::json cuts = nlohmann::json::array();
  for (const LayerSplit& s : splits) cuts.push_back({s.layer, s.front_heads});
  record["layout"]["split_layers"] = cuts;
}

bool plans_layer_cuts(const TrainSettings& settings) {
  return settings.split_layers_auto && settings.model.kind == "gpt" &&
         settings.model.gpt.layers >= 3 && settings.model.gpt.heads >= 2;
}

ModelSpec profiled_model(const TrainSettings& settings) {
  ModelSpec spec = settings.model;
  if (!plans_layer_cuts(settings)) return spec;
  const std::int64_t heads = spec.gpt.heads;
  spec.splits = {{0, 1}};
  if (heads > 2) spec.splits.push_back({1, heads - 1});
  return spec;
}

Result<ModelPlan> plan_model(const TrainSettings& settings, const sched::ModelProfile& measured,
                             const sched::RankTopology& topology,
                             const sched::OffloadBandwidth& bandwidth) {
  ModelPlan out;
  if (!plans_layer_cuts(settings)) {
    SPW_ASSIGN_OR_RETURN(out.plan,
                         sched::make_plan(plan_request(settings, measured, topology, bandwidth)));
    out.profile = measured;
    out.splits = settings.model.splits;
    if (settings.split_layers_auto) {
      out.plan.explanation +=
          "\nmodel.split_layers = \"auto\": cutting a layer between heads needs a gpt of at "
          "least 3 layers and 2 heads; whole layers kept";
    }
    return out;
  }
  SPW_ASSIGN_OR_RETURN(ProbeReading probe, read_probe(settings, measured));
  const sched::PlanRequest request = plan_request(settings, probe.whole, topology, bandwidth);
  SPW_ASSIGN_OR_RETURN(sched::Plan whole_layers, sched::make_plan(request));
  SPW_ASSIGN_OR_RETURN(sched::SplitLayerPlan cut,
                       sched::cut_layers_at_boundaries(request, whole_layers, probe.costs,
                                                       probe.layers));
  out.plan = std::move(cut.plan);
  out.profile = std::move(cut.profile);
  for (const sched::LayerCut& c : cut.cuts) {
    out.splits.push_back({std::stoll(c.layer.substr(std::string("blocks.").size())),
                          c.front_heads});
  }
  if (out.splits.empty()) {
    out.plan.explanation +=
        "\nmodel.split_layers = \"auto\": no cut between heads at a stage boundary shortens "
        "the iteration; whole layers kept";
  }
  return out;
}

std::int64_t job_microbatch_samples(const TrainSettings& settings) {
  return std::max<std::int64_t>(1, settings.batch / settings.microbatches);
}

sched::PlanRequest plan_request(const TrainSettings& settings, sched::ModelProfile profile,
                                sched::RankTopology topology,
                                const sched::OffloadBandwidth& bandwidth) {
  sched::PlanRequest request;
  request.profile = std::move(profile);
  request.topology = std::move(topology);
  request.global_batch = settings.batch;
  if (settings.memory_cap) {
    request.memory_cap_bytes = static_cast<std::int64_t>(*settings.memory_cap);
    request.memory_cap_is_node_share = settings.memory_cap_is_node_share;
  }
  request.layout = layout_choice(settings.layout);
  // The chunked head's forward adds to its weight gradient, which PipeFB keeps elsewhere.
  if (settings.model.kind == "gpt" && settings.model.gpt.head_chunk_rows > 0) {
    request.layout = sched::LayoutChoice::classic;
  }
  request.offload.choose = settings.offload.tier == OffloadTier::automatic;
  request.offload.bandwidth = bandwidth;
  // The job's own tier is how the run will offload, so every plan is priced with it. The
  // host tier is not modelled: such a job is planned as if it kept its stashes.
  const OffloadConfig& o = settings.offload;
  if (o.tier == OffloadTier::file || o.tier == OffloadTier::peer) {
    request.offload.fixed = {o.tier == OffloadTier::file ? sched::OffloadTier::file
                                                         : sched::OffloadTier::peer,
                             o.keep, o.lookahead};
  }
  return request;
}

Result<sched::Plan> predict_layout(const TrainSettings& settings,
                                   const sched::ModelProfile& profile,
                                   const sched::RankTopology& topology,
                                   const PipelineLayout& layout,
                                   const OffloadConfig& offload,
                                   const sched::OffloadBandwidth& bandwidth) {
  sched::Plan plan;
  plan.schedule = layout.schedule;
  plan.pipeline_ranks = layout.pipeline_ranks;
  plan.replicas = layout.replicas;
  plan.chunks = layout.chunks;
  plan.microbatches = layout.microbatches;
  plan.microbatch_samples = layout.microbatch_samples;
  std::string stages;
  for (const StageRange& range : layout.stages) {
    plan.stages.push_back({range.first, range.last});
    if (!stages.empty()) stages += " | ";
    stages += std::to_string(range.first) + "-" + std::to_string(range.last);
  }
  for (int r = 0; r < layout.world_size(); ++r) plan.world_rank.push_back(r);
  switch (offload.tier) {
    case OffloadTier::file: plan.offload.tier = sched::OffloadTier::file; break;
    case OffloadTier::peer: plan.offload.tier = sched::OffloadTier::peer; break;
    case OffloadTier::host: plan.offload.tier = sched::OffloadTier::host; break;
    // "auto" comes with planned stages only: a forced layout has none.
    case OffloadTier::none:
    case OffloadTier::automatic: break;
  }
  if (plan.offload.tier != sched::OffloadTier::none) {
    plan.offload.keep = offload.keep;
    plan.offload.lookahead = offload.lookahead;
  }
  SPW_ASSIGN_OR_RETURN(sched::Prediction predicted,
                       sched::predict(profile, topology, plan, bandwidth));
  plan.iteration_s = predicted.iteration_s;
  plan.bubble_fraction = predicted.bubble_fraction;
  plan.peak_memory_bytes = predicted.peak_memory_bytes;
  const auto peak = std::max_element(plan.peak_memory_bytes.begin(), plan.peak_memory_bytes.end());
  char numbers[160];
  std::snprintf(numbers, sizeof numbers, "iteration %.6g s (simulated), bubble %.1f%%\n",
                plan.iteration_s, 100 * plan.bubble_fraction);
  plan.explanation = "the job's layout: " + layout.describe() + "\nstages (blocks): " + stages +
                     "\n" + numbers + "peak " +
                     format_bytes(static_cast<std::size_t>(*peak)) + " on pipeline rank " +
                     std::to_string(peak - plan.peak_memory_bytes.begin());
  if (!settings.memory_cap) {
    const std::string warning =
        sched::node_memory_warning(plan, plan.peak_memory_bytes, topology);
    if (!warning.empty()) plan.explanation += "\n" + warning;
  }
  return plan;
}

Result<AutoPlan> plan_automatically(const TrainSettings& settings, MPI_Comm comm,
                                    const std::string& output_dir,
                                    const nlohmann::json& planned_for) {
  return measure_and_plan(settings, comm, output_dir, nullptr, {}, planned_for);
}

Result<AutoPlan> predict_requested_layout(const TrainSettings& settings,
                                          const PipelineLayout& layout,
                                          const OffloadConfig& offload, MPI_Comm comm,
                                          const std::string& output_dir) {
  return measure_and_plan(settings, comm, output_dir, &layout, offload, nullptr);
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
