#include "runtime/plan_command.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "kernels/memory_ledger.hpp"
#include "kernels/threading.hpp"
#include "partition/planner.hpp"
#include "runtime/auto_plan.hpp"
#include "runtime/available_memory.hpp"
#include "runtime/head_choice.hpp"
#include "runtime/json_file.hpp"
#include "runtime/node_facts.hpp"
#include "runtime/node_memory_budget.hpp"
#include "runtime/pipeline_job.hpp"
#include "runtime/plan_record.hpp"
#include "runtime/profiler.hpp"
#include "runtime/rank_links.hpp"
#include "runtime/train_command.hpp"

namespace spw {
namespace {

Status bad(const std::string& message) { return error(StatusCode::invalid_argument, message); }

// A path (it exists, or looks like one) or else a synthetic spec.
Result<sched::RankTopology> given_topology(const std::string& text) {
  const bool path = std::filesystem::exists(text) || text.find('/') != std::string::npos ||
                    text.ends_with(".json");
  if (!path) return sched::topology_from_spec(text);
  auto topology = sched::read_topology(text);
  if (topology.status().code() == StatusCode::io_error) {
    return error(StatusCode::not_found,
                 "--topology: cannot open topology " + text +
                     ": give a matrix file (partition/rank_topology.hpp) or a synthetic spec "
                     "such as 2x4,inter=1.25e10@2e-6");
  }
  return topology;
}

// N ranks on this node: links an earlier run measured on N ranks here (its cache in
// output.dir), else kThisNodeLink; node facts from hwloc.
Result<sched::RankTopology> this_node_topology(int ranks, const std::string& output_dir,
                                               std::string& links) {
  const std::string host = processor_name();
  SPW_ASSIGN_OR_RETURN(sched::NodeFacts facts, this_node_facts(host));
  const std::string cache = topology_cache_path(
      output_dir, std::vector<std::string>(static_cast<std::size_t>(ranks), host));
  if (std::filesystem::exists(cache)) {
    auto cached = sched::read_topology(cache);
    if (cached.ok() && cached->ranks == ranks) {
      cached->nodes = {facts};
      links = "measured by an earlier run of " + std::to_string(ranks) + " ranks on this node (" +
              cache + ")";
      return cached;
    }
  }
  SPW_ASSIGN_OR_RETURN(sched::RankTopology topology,
                       sched::synthetic_topology(1, ranks, kThisNodeLink, kThisNodeLink));
  topology.nodes = {facts};
  char text[256];
  std::snprintf(text, sizeof text,
                "defaults for ranks sharing this node, %.3g bytes/s and %.3g s (no measurement "
                "cached in %s: a run with stages = \"auto\" on %d ranks measures them)",
                kThisNodeLink.bandwidth_bytes_per_s, kThisNodeLink.latency_s, output_dir.c_str(),
                ranks);
  links = text;
  return topology;
}

}  // namespace

Status run_plan_command(const PlanCommand& command) {
  SPW_ASSIGN_OR_RETURN(JobConfig job, load_job_file(command.config_path, command.overrides));
  SPW_ASSIGN_OR_RETURN(TrainSettings settings, train_settings_from(job));
  if (command.ranks < 1) {
    return bad("--ranks = " + std::to_string(command.ranks) +
               " must be >= 1: the number of ranks to plan for");
  }
  if (!command.memory_cap.empty()) {
    auto cap = parse_bytes(command.memory_cap);
    if (!cap.ok()) return cap.status().with_context("--memory-cap");
    if (*cap == 0) return bad("--memory-cap must be at least 1 byte, got " + command.memory_cap);
    settings.memory_cap = *cap;
  }

  PlanSources sources;
  sched::RankTopology topology;
  if (!command.topology.empty()) {
    SPW_ASSIGN_OR_RETURN(topology, given_topology(command.topology));
    sources.links = "from --topology " + command.topology;
    if (topology.ranks != command.ranks) {
      return bad("--ranks " + std::to_string(command.ranks) + " but the topology " +
                 command.topology + " has " + std::to_string(topology.ranks) +
                 " ranks: give the same count");
    }
  } else {
    SPW_ASSIGN_OR_RETURN(topology,
                         this_node_topology(command.ranks, job.output.dir, sources.links));
  }

  // Without a cap, plan within each rank's share of its node's memory, as a run with
  // stages = "auto" does: this node's available memory, or what the topology's nodes have.
  if (!settings.memory_cap && job.parallel.stages.form == StagesSpec::Form::automatic) {
    std::vector<std::size_t> node_memory;
    if (command.topology.empty()) {
      if (const auto available = available_memory()) node_memory.push_back(available->bytes);
    } else {
      for (const sched::NodeFacts& node : topology.nodes) {
        node_memory.push_back(
            static_cast<std::size_t>(std::max<std::int64_t>(0, node.memory_bytes())));
      }
    }
    if (const auto share = planned_node_share(topology, node_memory); share && *share > 0) {
      settings.memory_cap = *share;
      settings.memory_cap_is_node_share = true;
    }
  }

  const std::int64_t samples = job_microbatch_samples(settings);
  // With model.split_layers = "auto", the probe model (auto_plan.hpp).
  TrainSettings profiled = settings;
  profiled.model = profiled_model(settings);
  sched::ModelProfile profile;
  std::optional<sched::ModelProfile> chunked_head;  // model.head_chunk_rows = "auto"
  // A profile file holds one head: the plan keeps it whole (a run measures both).
  const bool head_from_file = plans_head_chunks(settings) && !command.profile_path.empty();
  if (head_from_file) settings.head_chunk_auto = false;
  if (!command.profile_path.empty()) {
    SPW_ASSIGN_OR_RETURN(profile, sched::read_profile(command.profile_path));
    SPW_TRY(sched::check_profile_matches(profile, profiled.model.describe(),
                                         profiled.model.block_names(), samples,
                                         command.profile_path));
    sources.profile = "read from " + command.profile_path + " (measured with " +
                      sched::measured_with(profile) + ")";
  } else {
    // The threads one rank would get where rank 0 sits.
    ThreadRequest threads;
    threads.threads = job.threads.count;
    threads.local_ranks = topology.ranks_on_node(topology.node_of[0]);
    SPW_ASSIGN_OR_RETURN(ThreadSetup setup, setup_threads(threads));
    ProfileOptions options;
    options.microbatch_samples = samples;
    options.repeats = command.repeats;
    SPW_ASSIGN_OR_RETURN(profile, profile_model(profiled, options));
    if (plans_head_chunks(settings)) {
      SPW_ASSIGN_OR_RETURN(sched::ModelProfile measured,
                           profile_model(chunked_head_probe(settings), options));
      SPW_ASSIGN_OR_RETURN(chunked_head, with_chunked_head(settings, profile, measured));
    }
    sources.profile = "measured now on this node, " + std::to_string(setup.threads) +
                      " thread(s) (one rank's share of " + std::to_string(threads.local_ranks) +
                      " on a node), one process alone: a loaded node trains slower";
  }

  // One process measures alone here: a node whose ranks all offload at once may give each
  // less (a run with stages = "auto" measures them together).
  SPW_ASSIGN_OR_RETURN(FileTierRate file_rate, measure_file_tier_rate(job.offload, MPI_COMM_SELF));
  sources.offload = offload_pricing(file_rate, topology, profile, job.offload);
  sources.file_rate = file_rate.source;
  ModelPlan planned;
  if (job.parallel.stages.form == StagesSpec::Form::automatic) {
    sources.how = "searched by the planner";
    SPW_ASSIGN_OR_RETURN(
        planned, plan_model_and_head(settings, profile, chunked_head ? &*chunked_head : nullptr,
                                     topology, sources.offload));
    if (head_from_file) {
      planned.plan.explanation +=
          "\nmodel.head_chunk_rows = \"auto\": " + command.profile_path +
          " profiles one head, so the plan keeps it whole; spillway train profiles both";
    }
  } else {
    sources.how = "the job's own layout, predicted";
    SPW_ASSIGN_OR_RETURN(PipelineLayout layout, requested_layout(job, command.ranks));
    SPW_ASSIGN_OR_RETURN(planned.plan, predict_layout(settings, profile, topology, layout,
                                                      job.offload, sources.offload));
    planned.profile = profile;
  }
  nlohmann::json record = plan_record(planned.plan, planned.profile, topology, sources);
  record_layer_cuts(record, planned.splits);
  record_head_chunks(record, settings, planned.head_chunk_rows);
  std::string path = command.output_path;
  if (path.empty()) {
    SPW_TRY(ensure_directory(job.output.dir));
    path = job.output.dir + "/plan.json";
  }
  SPW_TRY(write_json_atomically(path, record));
  std::printf("spillway: plan for %d ranks of %s: %s\n%s", command.ranks,
              settings.model.describe().c_str(), path.c_str(), plan_text(record).c_str());
  return Status::success();
}

}  // namespace spw
