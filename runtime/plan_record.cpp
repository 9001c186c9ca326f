#include "runtime/plan_record.hpp"

#include <algorithm>
#include <cstdio>

#include "kernels/memory_ledger.hpp"
#include "runtime/node_facts.hpp"

namespace spw {
namespace {

std::string bytes(const nlohmann::json& value) {
  return format_bytes(value.get<std::size_t>());
}

}  // namespace

nlohmann::json plan_record(const sched::Plan& plan, const sched::ModelProfile& profile,
                           const sched::RankTopology& topology, const PlanSources& sources) {
  const sched::BlockSums blocks = sched::scale_blocks(profile, plan.microbatch_samples);
  nlohmann::json stages = nlohmann::json::array(), ranges = nlohmann::json::array();
  for (int s = 0; s < static_cast<int>(plan.stages.size()); ++s) {
    const sched::StageRange range = plan.stages[static_cast<std::size_t>(s)];
    const sched::StageCost cost = blocks.stage(range);
    // The lists (pipeline ranks) running the stage: one, or under PipeFB a forward and a
    // backward one; the world ranks running it in every replica, in that order.
    std::vector<int> lists = {plan.forward_list_of(s)};
    if (plan.backward_list_of(s) != lists.front()) lists.push_back(plan.backward_list_of(s));
    std::vector<int> ranks;
    for (int replica = 0; replica < plan.replicas; ++replica)
      for (int list : lists) ranks.push_back(plan.world_rank_of(replica, list));
    ranges.push_back({range.first, range.last});
    stages.push_back(
        {{"stage", s},
         {"blocks", {range.first, range.last}},
         {"pipeline_ranks", lists},
         {"ranks", ranks},
         {"compute_seconds_per_microbatch",
          cost.forward_s + cost.backward_input_s + cost.backward_weight_s},
         {"forward_seconds", cost.forward_s},
         {"backward_input_seconds", cost.backward_input_s},
         {"backward_weight_seconds", cost.backward_weight_s},
         {"stash_bytes_per_microbatch", cost.stash_bytes},
         {"parameter_bytes", cost.parameter_bytes},
         {"parameter_gradient_optimizer_bytes", blocks.resident_bytes(range)}});
  }
  return {{"how", sources.how},
          {"layout",
           {{"schedule", plan.schedule},
            {"pipeline_ranks", plan.pipeline_ranks},
            {"replicas", plan.replicas},
            {"chunks", plan.chunks},
            {"microbatches", plan.microbatches},
            {"microbatch_samples", plan.microbatch_samples},
            {"stages", ranges},
            {"world_rank", plan.world_rank},
            {"offload",
             {{"tier", sched::offload_tier_name(plan.offload.tier)},
              {"keep", plan.offload.keep},
              {"lookahead", plan.offload.lookahead},
              {"transfer_s", plan.offload_transfer_s},
              {"exposed_s", plan.offload_exposed_s},
              {"file_bytes_per_second", sources.offload.file_bytes_per_s},
              {"file_rate_source", sources.file_rate},
              {"copies_take_compute", sources.offload.copies_take_compute}}}}},
          {"predicted",
           {{"iteration_seconds", plan.iteration_s},
            {"bubble_fraction", plan.bubble_fraction},
            {"peak_bytes_by_pipeline_rank", plan.peak_memory_bytes},  // [list]
            {"simulated", plan.simulated},
            {"exact", plan.exact},
            {"mapping_lower_bound_seconds", plan.mapping_lower_bound_s}}},
          {"stages", stages},
          {"explanation", plan.explanation},
          {"profile",
           {{"source", sources.profile},
            {"model", profile.model},
            {"microbatch_samples", profile.microbatch_samples},
            {"threads", profile.threads},
            {"host", profile.host},
            {"blas_kernels", profile.blas_kernels}}},
          {"topology",
           {{"ranks", topology.ranks},
            {"links", sources.links},
            {"node_of", topology.node_of},
            {"nodes", nodes_report(topology.node_of, topology.nodes)}}}};
}

std::string plan_text(const nlohmann::json& record) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-6s %-9s %-12s %14s %12s %12s %12s\n", "stage", "blocks",
                "ranks", "F+B+W ms/mb", "stash/mb", "parameters", "rank peak");
  out += line;
  const auto& peaks = record["predicted"]["peak_bytes_by_pipeline_rank"];
  for (const auto& stage : record["stages"]) {
    std::string ranks;
    for (const auto& r : stage["ranks"]) {
      if (!ranks.empty()) ranks += ',';
      ranks += r.dump();
    }
    const std::string blocks =
        stage["blocks"][0].dump() + "-" + stage["blocks"][1].dump();
    std::size_t peak = 0;  // the highest of its ranks' (PipeFB: forward and backward)
    for (const auto& list : stage["pipeline_ranks"])
      peak = std::max(peak, peaks[list.get<std::size_t>()].get<std::size_t>());
    std::snprintf(line, sizeof line, "%-6d %-9s %-12s %14.2f %12s %12s %12s\n",
                  stage["stage"].get<int>(), blocks.c_str(), ranks.c_str(),
                  1e3 * stage["compute_seconds_per_microbatch"].get<double>(),
                  bytes(stage["stash_bytes_per_microbatch"]).c_str(),
                  bytes(stage["parameter_bytes"]).c_str(), format_bytes(peak).c_str());
    out += line;
  }
  std::snprintf(line, sizeof line, "predicted iteration %.4g s, bubble %.1f%% (%s)\n",
                record["predicted"]["iteration_seconds"].get<double>(),
                100 * record["predicted"]["bubble_fraction"].get<double>(),
                record["how"].get<std::string>().c_str());
  out += line;
  out += record["explanation"].get<std::string>() + "\n";
  out += "profile: " + record["profile"]["source"].get<std::string>() + "\n";
  out += "links: " + record["topology"]["links"].get<std::string>() + "\n";
  const auto& offload = record["layout"]["offload"];
  const std::string file_rate = offload.value("file_rate_source", std::string());
  if (!file_rate.empty()) out += "file tier: " + file_rate + "\n";
  const auto& nodes = record["topology"]["nodes"];
  if (nodes.empty()) out += "nodes: no facts known (the topology gives none)\n";
  for (const auto& node : nodes) out += node["description"].get<std::string>() + "\n";
  return out;
}

}  // namespace spw
