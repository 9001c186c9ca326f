// The offload policies the planner tries for a candidate that does not fit without one.
#include "partition/planner_search.hpp"

namespace spw::sched::planner_detail {

Result<Evaluated> Search::simulate_offload(Shape& s, PipelineLayout l, OffloadChoice choice,
                                           const Evaluated& plain) {
  l.offload = choice;
  auto [it, fresh] = s.offloaded.try_emplace({choice.keep, choice.lookahead});
  if (fresh) {
    SPW_ASSIGN_OR_RETURN(it->second, insert_offload(*s.generated, {choice.keep, choice.lookahead}));
  }
  ++simulations_;
  simulated_passes_ += static_cast<std::int64_t>(s.P) * s.v * s.m;
  Evaluated e;
  SPW_ASSIGN_OR_RETURN(e.prediction,
                       predict(it->second, *s.blocks, topo_, l, false, q_.offload.bandwidth));
  e.peak = *std::max_element(e.prediction.peak_memory_bytes.begin(),
                             e.prediction.peak_memory_bytes.end());
  e.offload = choice;
  e.exposed_s = e.prediction.iteration_s - plain.prediction.iteration_s;
  return e;
}

// The fastest offload policy that brings a candidate within the cap, if any. Offloading
// only adds waits (the simulator's times never shrink), so nothing beats the candidate's
// own time and the search stops at a policy that costs nothing.
Result<std::optional<Evaluated>> Search::best_offload(const Candidate& c, Shape& s,
                                                      const PipelineLayout& l,
                                                      const Evaluated& plain) {
  std::optional<Evaluated> found;
  const int K = s.keep_limit, L = q_.limits.max_lookahead;
  const auto free_of_cost = [&] {
    return found && found->prediction.iteration_s <= plain.prediction.iteration_s * (1 + 1e-12);
  };
  const auto consider = [&](const Evaluated& e) {
    consider_smallest(c, e);
    if (e.peak <= cap() && (!found || e.prediction.iteration_s < found->prediction.iteration_s))
      found = e;
  };
  std::vector<StageCost> stages;
  for (const StageRange& r : l.stages) stages.push_back(s.blocks->stage(r));
  if (s.max_live_stashes.empty()) {
    SPW_ASSIGN_OR_RETURN(const ValidationReport report, validate(*s.generated));
    s.max_live_stashes = report.max_live_stashes;
  }
  for (OffloadTier tier : q_.offload.tiers) {
    PipelineLayout tried = l;
    tried.offload.tier = tier;
    if (!check_offload(tried).ok()) continue;  // peer without a partner
    // What the tier reserves does not depend on keep and lookahead: with the memory bound
    // of one resident stash it rules a tier out without simulating it.
    const std::vector<std::int64_t> reserved =
        offload_reserved_bytes(tried, stages, s.max_live_stashes);
    bool possible = true;
    for (int r = 0; r < s.lists(); ++r)
      possible = possible && memory_lower_bound(s.facts, stages, r, true) +
                                     reserved[index(r)] <= cap();
    if (!possible) continue;
    if (static_cast<std::int64_t>(K) * (L + 1) <= q_.limits.exhaustive_policies) {
      for (int lookahead = 0; lookahead <= L && !free_of_cost(); ++lookahead)
        for (int keep = K - 1; keep >= 0 && !free_of_cost(); --keep) {
          SPW_ASSIGN_OR_RETURN(Evaluated e, simulate_offload(s, l, {tier, keep, lookahead}, plain));
          consider(e);
        }
      continue;
    }
    // Many policies: per lookahead, the largest keep that fits, assuming the peak grows with
    // keep and with lookahead (kept and prefetched stashes only add to what is resident;
    // not proven), so a lookahead where nothing fits ends the tier.
    policies_exhaustive_ = false;
    for (int lookahead = 0; lookahead <= L && !free_of_cost(); ++lookahead) {
      int lo = 0, hi = K - 1;  // find the largest keep in [lo, hi] that fits
      std::optional<Evaluated> fit;
      while (lo <= hi) {
        const int keep = lo + (hi - lo) / 2;
        SPW_ASSIGN_OR_RETURN(Evaluated e, simulate_offload(s, l, {tier, keep, lookahead}, plain));
        consider_smallest(c, e);
        if (e.peak <= cap()) {
          fit = e;
          lo = keep + 1;
        } else {
          hi = keep - 1;
        }
      }
      if (!fit) break;
      consider(*fit);
    }
  }
  return found;
}

}  // namespace spw::sched::planner_detail
