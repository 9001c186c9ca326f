// What a plan says about itself: its numbers, and a few lines for people.
#include "partition/planner_search.hpp"

namespace spw::sched::planner_detail {

// Why this layout family: the other one's best, or why it has none.
std::string Search::layout_reason(const Candidate& c, const Evaluated& e) const {
  const int mine = shapes_[index(c.shape)].family(), other = 1 - mine;
  const std::string chosen = family_name(mine);
  if (q_.layout == LayoutChoice::pipefb) return "layout: pipefb, as the request asks";
  if (mine == kClassic && q_.layout == LayoutChoice::classic)
    return "layout: classic, as the request asks";
  const FamilyRecord& rival = families_[index(other)];
  const std::string rival_name = family_name(other);
  if (rival.shapes == 0)
    return "layout: " + chosen + ", the only kind with a shape for " +
           std::to_string(topo_.ranks) + " ranks and a batch of " +
           std::to_string(q_.global_batch) +
           (other == kSplit ? " (pipefb needs 2 ranks per stage in every replica)" : "");
  if (rival.best)
    return "layout: " + chosen + ", predicted " + seconds_text(e.prediction.iteration_s) +
           " against " + seconds_text(rival.best->second.prediction.iteration_s) +
           " for the best " + rival_name + " plan found (" +
           shapes_[index(rival.best->first.shape)].name() + ")";
  if (rival.candidates > 0 &&
      unexplored_bound_[index(other)] < std::numeric_limits<double>::infinity())
    return "layout: " + chosen + ", predicted " + seconds_text(e.prediction.iteration_s) +
           "; no " + rival_name + " plan can take less than " +
           seconds_text(unexplored_bound_[index(other)]) + " (lower bound)";
  return "layout: " + chosen + ", the only kind within the memory cap: no " + rival_name +
         " plan fits";
}

Plan Search::finish(const Candidate& c, const Evaluated& e, bool exact, const char* why) {
  const Shape& s = shapes_[index(c.shape)];
  Plan plan;
  static_cast<PipelineLayout&>(plan) = layout(s, c.partition, c.mapping);
  plan.offload = e.offload;
  plan.iteration_s = e.prediction.iteration_s;
  plan.bubble_fraction = e.prediction.bubble_fraction;
  plan.peak_memory_bytes = e.prediction.peak_memory_bytes;
  plan.offload_transfer_s = e.prediction.offload_transfer_s;
  plan.offload_exposed_s = e.exposed_s;
  plan.simulated = s.generated != nullptr;
  plan.exact = exact;
  plan.candidates = static_cast<std::int64_t>(candidates_.size());
  // No mapping beats free links and the fastest ring (the simulator is monotone in costs),
  // nor does offloading make anything faster: the plain schedule gives the bound.
  PipelineLayout plain = plan;
  plain.offload = {};
  if (s.generated) {
    const auto bound = mapping_lower_bound_s(*s.generated, *s.blocks, topo_, plan);
    ++simulations_;
    plan.mapping_lower_bound_s = bound.ok() ? *bound : 0;
  } else {
    const int S = s.P * s.v;
    plan.mapping_lower_bound_s =
        iteration_lower_bound(s.facts, stage_costs(*s.blocks, topo_, plain, /*ideal=*/true),
                              std::vector<Link>(index(S - 1)), std::vector<Link>(index(S - 1)),
                              optimizer_step_s(*s.blocks, plain));
  }
  plan.simulations = simulations_;

  std::string stages;
  for (std::size_t i = 0; i < plan.stages.size(); ++i)
    stages += (i ? " | " : "") + std::to_string(plan.stages[i].first) + "-" +
              std::to_string(plan.stages[i].last);
  const auto peak = std::max_element(plan.peak_memory_bytes.begin(), plan.peak_memory_bytes.end());
  const int at = static_cast<int>(peak - plan.peak_memory_bytes.begin());
  char numbers[256];
  std::snprintf(
      numbers, sizeof numbers, "bubble %.1f%%; no mapping of ranks is more than %.1f%% faster",
      100 * plan.bubble_fraction,
      plan.mapping_lower_bound_s > 0 ? 100 * (plan.iteration_s / plan.mapping_lower_bound_s - 1)
                                     : 0.0);
  std::string offload;
  if (plan.offload.tier != OffloadTier::none) {
    char text[192];
    std::snprintf(text, sizeof text,
                  "offload: %s, keep %d, lookahead %d; %.6g s of copies on the busiest rank, "
                  "%.6g s of it exposed",
                  offload_tier_name(plan.offload.tier), plan.offload.keep, plan.offload.lookahead,
                  plan.offload_transfer_s, std::max(0.0, plan.offload_exposed_s));
    offload = std::string(text) +
              (q_.offload.bandwidth.copies_take_compute && plan.offload_transfer_s > 0
                   ? ", taking turns with compute (no core is spare for the copies)"
                   : "") +
              (fixed_offload() ? " (the job's policy)\n"
                               : " (without offload the peak is over the cap)\n");
  } else if (q_.offload.choose) {
    offload = "offload: none, every rank fits without it\n";
  }
  plan.explanation =
      s.name() + ", " + std::to_string(s.samples) + " samples per microbatch" +
      (s.split ? ", each stage's forwards and backwards on two ranks (" +
                     std::to_string(s.lists()) + " ranks per pipeline)"
               : "") +
      "\n" + layout_reason(c, e) + "\n" + "stages (blocks): " + stages + "\n" + "iteration " +
      seconds_text(plan.iteration_s) +
      (plan.simulated ? " (simulated)" : " (closed-form bound: too large to simulate)") + ", " +
      numbers + "\n" + "peak " + bytes_text(*peak) + " on pipeline rank " + std::to_string(at) +
      (s.split ? std::string(at < s.P ? " (forward" : " (backward") + " rank of stage " +
                     std::to_string(at % s.P) + ")"
               : "") +
      (!q_.memory_cap_bytes ? std::string()
       : q_.memory_cap_is_node_share
           ? " of " + bytes_text(*q_.memory_cap_bytes) + ", each rank's share of its node's memory"
           : " of a " + bytes_text(*q_.memory_cap_bytes) + " cap") +
      "\n" + offload + std::to_string(plan.candidates) + " candidates, " +
      std::to_string(plan.simulations) + " simulations; " + why;
  if (!q_.memory_cap_bytes) {
    const std::string warning = node_memory_warning(plan, plan.peak_memory_bytes, topo_);
    if (!warning.empty()) plan.explanation += "\n" + warning;
  }
  return plan;
}

}  // namespace spw::sched::planner_detail
