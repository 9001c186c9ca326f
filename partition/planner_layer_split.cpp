#include "partition/planner_layer_split.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include "partition/generators.hpp"
#include "partition/planner_cost.hpp"

namespace spw::sched {
namespace {

// Where front_heads lies between the two measured cuts: 0 at the first, 1 at the last.
double position(const LayerSplitCosts& costs, int front_heads) {
  return costs.heads > 2 ? double(front_heads - 1) / double(costs.heads - 2) : 0.0;
}

double mix(double a, double b, double t) { return a + (b - a) * t; }
std::int64_t mix(std::int64_t a, std::int64_t b, double t) {
  return static_cast<std::int64_t>(std::llround(static_cast<double>(a) +
                                                static_cast<double>(b - a) * t));
}

BlockProfile blend(const BlockProfile& a, const BlockProfile& b, double t, std::string name) {
  BlockProfile out = a;
  out.name = std::move(name);
  out.forward_s = mix(a.forward_s, b.forward_s, t);
  out.backward_input_s = mix(a.backward_input_s, b.backward_input_s, t);
  out.backward_weight_s = mix(a.backward_weight_s, b.backward_weight_s, t);
  out.stash_bytes = mix(a.stash_bytes, b.stash_bytes, t);
  out.activation_bytes = mix(a.activation_bytes, b.activation_bytes, t);
  out.parameter_bytes = mix(a.parameter_bytes, b.parameter_bytes, t);
  out.gradient_bytes = mix(a.gradient_bytes, b.gradient_bytes, t);
  out.optimizer_state_bytes = mix(a.optimizer_state_bytes, b.optimizer_state_bytes, t);
  out.backward_bytes = mix(a.backward_bytes, b.backward_bytes, t);
  out.workspace_bytes = mix(a.workspace_bytes, b.workspace_bytes, t);
  out.scratch_bytes = std::max(a.scratch_bytes, b.scratch_bytes);
  if (a.scratch_growth_bytes && b.scratch_growth_bytes) {
    out.scratch_growth_bytes = std::max(*a.scratch_growth_bytes, *b.scratch_growth_bytes);
  } else {
    out.scratch_growth_bytes = std::nullopt;
  }
  if (a.one_sample && b.one_sample) {
    out.one_sample = PassSeconds{mix(a.one_sample->forward_s, b.one_sample->forward_s, t),
                                 mix(a.one_sample->backward_input_s,
                                     b.one_sample->backward_input_s, t),
                                 mix(a.one_sample->backward_weight_s,
                                     b.one_sample->backward_weight_s, t)};
  } else {
    out.one_sample = std::nullopt;
  }
  return out;
}

// `ranges` with block `block` replaced by two, the boundary between stages `stage` and
// `stage + 1` put between them: `stage` ends with the front, `stage + 1` starts with the back.
std::vector<StageRange> cut_ranges(std::vector<StageRange> ranges, int stage, int block) {
  for (StageRange& r : ranges) {
    if (r.first > block) ++r.first;
    if (r.last >= block) ++r.last;
  }
  ranges[static_cast<std::size_t>(stage)].last = block;
  ranges[static_cast<std::size_t>(stage) + 1].first = block + 1;
  return ranges;
}

struct Candidate {
  ModelProfile profile;
  Plan plan;
  LayerCut cut;
  std::vector<int> origin;  // per block of `profile`: its block in the unsplit profile, or -1
};

// The planner's claims were about whole layers. A cut layout improves on its answer one
// boundary at a time, which proves no optimum, and its stages are not the ones the mapping
// bound was taken for (left as it was, that bound can exceed the cut plan's iteration): it
// is taken again, as the planner takes it (free links, the fastest ring, no offload).
Status restate_claims(const PlanRequest& request, SplitLayerPlan& best, std::int64_t tries) {
  Plan& plan = best.plan;
  plan.exact = false;
  SPW_ASSIGN_OR_RETURN(const Schedule schedule,
                       make_schedule(plan.schedule, {plan.pipeline_ranks, plan.microbatches,
                                                     plan.chunks, plan.replicas > 1}));
  SPW_ASSIGN_OR_RETURN(plan.mapping_lower_bound_s,
                       mapping_lower_bound_s(schedule,
                                             scale_blocks(best.profile, plan.microbatch_samples),
                                             request.topology, plan));
  ++plan.simulations;
  const double bound = plan.mapping_lower_bound_s;
  char line[200];
  std::snprintf(line, sizeof line,
                "\nafter the cuts: no mapping of ranks is more than %.1f%% faster; %lld cuts "
                "tried; approximate: each boundary cut in turn, over the whole-layer layout",
                bound > 0 ? 100 * (plan.iteration_s / bound - 1) : 0.0,
                static_cast<long long>(tries));
  plan.explanation += line;
  return Status::success();
}

}  // namespace

BlockProfile layer_front(const LayerSplitCosts& costs, int front_heads,
                         const std::string& layer) {
  return blend(costs.front_first, costs.front_last, position(costs, front_heads),
               layer + ".front");
}

BlockProfile layer_back(const LayerSplitCosts& costs, int front_heads,
                        const std::string& layer) {
  return blend(costs.back_first, costs.back_last, position(costs, front_heads),
               layer + ".back");
}

Result<SplitLayerPlan> cut_layers_at_boundaries(const PlanRequest& request, const Plan& plan,
                                                const LayerSplitCosts& costs,
                                                const std::vector<std::string>& splittable) {
  if (costs.heads < 2) {
    return error(StatusCode::invalid_argument,
                 "planner: a layer with " + std::to_string(costs.heads) +
                     " head(s) cannot be cut between heads");
  }
  SplitLayerPlan best{plan, request.profile, {}};
  std::vector<int> origin(request.profile.blocks.size());
  for (std::size_t b = 0; b < origin.size(); ++b) origin[b] = static_cast<int>(b);
  const auto fits = [&](const Prediction& p) {
    if (!request.memory_cap_bytes) return true;
    return std::all_of(p.peak_memory_bytes.begin(), p.peak_memory_bytes.end(),
                       [&](std::int64_t peak) { return peak <= *request.memory_cap_bytes; });
  };
  // Plans predicted by the closed-form bound (too large to simulate) keep whole layers, and
  // the cuts tried stop at the planner's simulation budget: each try replays the layout.
  if (!plan.simulated) return best;
  const std::int64_t passes_per_try =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(plan.stages.size()) * plan.microbatches);
  std::int64_t spent = 0;
  const int stages = static_cast<int>(plan.stages.size());
  for (int stage = 0; stage + 1 < stages; ++stage) {
    if (spent + 2 * (costs.heads - 1) * passes_per_try > request.limits.simulation_budget) {
      best.plan.explanation += "\nlayer cuts tried at " + std::to_string(stage) + " of the " +
                               std::to_string(stages - 1) +
                               " stage boundaries: the simulation budget is spent";
      break;
    }
    std::optional<Candidate> chosen;
    const int end = best.plan.stages[static_cast<std::size_t>(stage)].last;
    for (int block : {end, end + 1}) {
      const int whole = origin[static_cast<std::size_t>(block)];
      if (whole < 0) continue;  // a front or back already
      const std::string& name = request.profile.blocks[static_cast<std::size_t>(whole)].name;
      if (std::find(splittable.begin(), splittable.end(), name) == splittable.end()) continue;
      for (int k = 1; k < costs.heads; ++k) {
        Candidate c;
        c.profile = best.profile;
        auto at = c.profile.blocks.begin() + block;
        at = c.profile.blocks.erase(at);
        at = c.profile.blocks.insert(at, layer_back(costs, k, name));
        c.profile.blocks.insert(at, layer_front(costs, k, name));
        c.plan = best.plan;
        c.plan.stages = cut_ranges(best.plan.stages, stage, block);
        spent += passes_per_try;
        SPW_ASSIGN_OR_RETURN(const Prediction p, predict(c.profile, request.topology, c.plan,
                                                         request.offload.bandwidth));
        if (!fits(p)) continue;
        c.plan.iteration_s = p.iteration_s;
        c.plan.bubble_fraction = p.bubble_fraction;
        c.plan.peak_memory_bytes = p.peak_memory_bytes;
        c.plan.offload_transfer_s = p.offload_transfer_s;
        c.cut = {name, whole, k};
        c.origin = origin;
        c.origin[static_cast<std::size_t>(block)] = -1;
        c.origin.insert(c.origin.begin() + block + 1, -1);
        if (!chosen || c.plan.iteration_s < chosen->plan.iteration_s) chosen = std::move(c);
      }
    }
    if (!chosen || chosen->plan.iteration_s > best.plan.iteration_s * (1 - 1e-3)) continue;
    char line[200];
    std::snprintf(line, sizeof line,
                  "\n%s cut after %d of its %d heads between stages %d and %d: iteration "
                  "%.6g s instead of %.6g s",
                  chosen->cut.layer.c_str(), chosen->cut.front_heads, costs.heads, stage,
                  stage + 1, chosen->plan.iteration_s, best.plan.iteration_s);
    chosen->plan.explanation += line;
    best.plan = std::move(chosen->plan);
    best.profile = std::move(chosen->profile);
    best.cuts.push_back(chosen->cut);
    origin = std::move(chosen->origin);
  }
  std::sort(best.cuts.begin(), best.cuts.end(),
            [](const LayerCut& a, const LayerCut& b) { return a.block < b.block; });
  const std::int64_t tries = spent / passes_per_try;
  best.plan.candidates += tries;
  best.plan.simulations += static_cast<int>(tries);
  if (!best.cuts.empty()) SPW_TRY(restate_claims(request, best, tries));
  return best;
}

}  // namespace spw::sched
