// Stage boundaries inside a layer. A layer of H attention heads can be cut after k of them
// (runtime/gpt_split_layer.hpp: a front with LN1 and k heads, a back with the rest), so two
// neighbouring stages can differ by a head's work instead of a layer's. After the planner
// has chosen a layout over whole blocks, each stage boundary is tried inside the layer on
// either side of it, at every k, and kept where the simulator predicts a shorter iteration.
//
// Costs of a cut come from two measured ones, after the first head and after all but the
// last (a probe profile: two layers cut so), and lie on the line between them in k: heads
// are equal, so what a front or back holds grows or shrinks by a head's share per head.
#pragma once

#include <string>
#include <vector>

#include "kernels/status.hpp"
#include "partition/planner.hpp"
#include "partition/profile.hpp"

namespace spw::sched {

struct LayerSplitCosts {
  int heads = 0;  // H >= 2: cuts after 1 .. H - 1 heads
  BlockProfile front_first, back_first;  // measured, cut after 1 head
  BlockProfile front_last, back_last;    // measured, cut after H - 1 (the same when H = 2)
};

// The front and back of a layer cut after `front_heads`, named "<layer>.front" and
// "<layer>.back". Requires 1 <= front_heads < costs.heads.
BlockProfile layer_front(const LayerSplitCosts& costs, int front_heads, const std::string& layer);
BlockProfile layer_back(const LayerSplitCosts& costs, int front_heads, const std::string& layer);

struct LayerCut {
  std::string layer;  // the block name of the whole layer in the unsplit profile
  int block = 0;      // its index there
  int front_heads = 0;
  friend bool operator==(const LayerCut&, const LayerCut&) = default;
};

struct SplitLayerPlan {
  Plan plan;              // stages over `profile`'s blocks, prediction and peaks updated
  ModelProfile profile;   // the request's, with each cut layer as its front and back
  std::vector<LayerCut> cuts;  // in block order
};

// `plan`, made by make_plan(request), with each stage boundary moved into the layer before
// or after it where that shortens the predicted iteration by at least 0.1% and every rank's
// peak stays within the request's cap; boundaries are taken in order, each against the
// layout the earlier ones left. `splittable` names the blocks that may be cut (whole
// transformer layers). Without a shorter layout the plan comes back unchanged, with no cuts;
// so does a plan predicted by the closed-form bound (too large to simulate), and the tries
// stop, saying so in the explanation, once they would replay more forward passes than
// request.limits.simulation_budget. The tries count among the plan's candidates and
// simulations; a plan with cuts is not `exact` and gets the mapping bound of its own stages.
// invalid_argument for costs with fewer than 2 heads; errors of predict otherwise.
Result<SplitLayerPlan> cut_layers_at_boundaries(const PlanRequest& request, const Plan& plan,
                                                const LayerSplitCosts& costs,
                                                const std::vector<std::string>& splittable);

}  // namespace spw::sched
