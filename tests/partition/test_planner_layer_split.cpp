// Stage boundaries moved inside a layer: the costs of a cut after k heads lie between the two
// measured cuts, and the planner keeps a cut only where it shortens the predicted iteration.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "partition/planner.hpp"
#include "partition/planner_layer_split.hpp"
#include "partition/rank_topology.hpp"
#include "partition/planner_test_support.hpp"

namespace spw::sched {
namespace {

BlockProfile block(const std::string& name, double each_pass_s) {
  return uniform_block(name, each_pass_s);
}

// A tiny embedding, three layers of 1 s a pass and a head of 0.6 s: on two ranks whole
// blocks split 2 | 1.6 layers' worth at best.
ModelProfile three_layers() {
  ModelProfile p;
  p.model = "test";
  p.blocks = {block("embedding", 0.01), block("blocks.0", 1), block("blocks.1", 1),
              block("blocks.2", 1), block("head", 0.6)};
  return p;
}

// Four heads; a front holds a quarter of the layer per head, a back the rest, plus what the
// cut itself costs each of them.
LayerSplitCosts quarter_heads(double overhead_s) {
  LayerSplitCosts c;
  c.heads = 4;
  c.front_first = block("probe.front", 0.25 + overhead_s);
  c.back_first = block("probe.back", 0.75 + overhead_s);
  c.front_last = block("probe.front", 0.75 + overhead_s);
  c.back_last = block("probe.back", 0.25 + overhead_s);
  c.front_first.activation_bytes = c.front_last.activation_bytes = 3 << 10;
  return c;
}

PlanRequest two_ranks(const ModelProfile& profile) {
  PlanRequest r;
  r.profile = profile;
  auto topology = synthetic_topology(1, 2, Link{1e7, 1e-6}, Link{1e7, 1e-6});
  EXPECT_TRUE(topology.ok()) << topology.status().message();
  r.topology = *topology;
  r.global_batch = 8;
  r.schedules = {"1f1b"};
  r.layout = LayoutChoice::classic;
  r.limits.max_microbatches = 8;
  return r;
}

const std::vector<std::string> kLayers{"blocks.0", "blocks.1", "blocks.2"};

TEST(LayerSplitCosts, LieOnTheLineBetweenTheTwoMeasuredCuts) {
  const LayerSplitCosts c = quarter_heads(0);
  EXPECT_DOUBLE_EQ(layer_front(c, 1, "blocks.3").forward_s, 0.25);
  EXPECT_DOUBLE_EQ(layer_front(c, 2, "blocks.3").forward_s, 0.5);
  EXPECT_DOUBLE_EQ(layer_front(c, 3, "blocks.3").forward_s, 0.75);
  EXPECT_DOUBLE_EQ(layer_back(c, 2, "blocks.3").backward_weight_s, 0.5);
  EXPECT_EQ(layer_front(c, 2, "blocks.3").name, "blocks.3.front");
  EXPECT_EQ(layer_back(c, 2, "blocks.3").name, "blocks.3.back");
  EXPECT_EQ(layer_front(c, 2, "blocks.3").activation_bytes, 3 << 10);
  // Two heads: one cut only, the measured one.
  LayerSplitCosts two = c;
  two.heads = 2;
  EXPECT_DOUBLE_EQ(layer_front(two, 1, "x").forward_s, 0.25);
}

TEST(CutLayersAtBoundaries, MovesTheBoundaryIntoTheLayerThatLevelsTheStages) {
  const PlanRequest request = two_ranks(three_layers());
  auto plan = make_plan(request);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ASSERT_EQ(plan->stages.size(), 2u);
  // Whole blocks: embedding and two layers | a layer and the head.
  EXPECT_EQ(plan->stages[0].last, 2) << plan->explanation;

  auto cut = cut_layers_at_boundaries(request, *plan, quarter_heads(0), kLayers);
  ASSERT_TRUE(cut.ok()) << cut.status().message();
  // Stage 0 gives a head of blocks.1 to stage 1: 1.76 against 1.85 layers' worth, the most
  // level cut (at 2 heads it would be 1.51 | 2.1).
  ASSERT_EQ(cut->cuts.size(), 1u);
  EXPECT_EQ(cut->cuts[0], (LayerCut{"blocks.1", 2, 3}));
  ASSERT_EQ(cut->profile.blocks.size(), 6u);
  EXPECT_EQ(cut->profile.blocks[2].name, "blocks.1.front");
  EXPECT_EQ(cut->profile.blocks[3].name, "blocks.1.back");
  EXPECT_EQ(cut->plan.stages, (std::vector<StageRange>{{0, 2}, {3, 5}}));
  EXPECT_LT(cut->plan.iteration_s, plan->iteration_s * 0.97);
  // The prediction is the simulator's for the cut profile and layout.
  auto again = predict(cut->profile, request.topology, cut->plan);
  ASSERT_TRUE(again.ok());
  EXPECT_DOUBLE_EQ(again->iteration_s, cut->plan.iteration_s);
  EXPECT_NE(cut->plan.explanation.find("blocks.1 cut after 3 of its 4 heads between stages 0 "
                                       "and 1"),
            std::string::npos)
      << cut->plan.explanation;
  // The whole-layer search's claims do not carry over: the cut plan is no proven optimum,
  // its tries are counted, and its mapping bound is the cut stages' own.
  EXPECT_TRUE(plan->exact) << plan->explanation;
  EXPECT_FALSE(cut->plan.exact);
  EXPECT_EQ(cut->plan.candidates, plan->candidates + 6);
  EXPECT_EQ(cut->plan.simulations, plan->simulations + 7);
  EXPECT_GT(cut->plan.mapping_lower_bound_s, 0);
  EXPECT_LE(cut->plan.mapping_lower_bound_s, cut->plan.iteration_s);
  EXPECT_LT(cut->plan.mapping_lower_bound_s, plan->mapping_lower_bound_s);
  EXPECT_NE(cut->plan.explanation.find("after the cuts: no mapping of ranks is more than "),
            std::string::npos)
      << cut->plan.explanation;
  EXPECT_NE(cut->plan.explanation.find("6 cuts tried; approximate"), std::string::npos)
      << cut->plan.explanation;
}

TEST(CutLayersAtBoundaries, KeepsWholeLayersWhereACutCostsMoreThanItLevels) {
  const PlanRequest request = two_ranks(three_layers());
  auto plan = make_plan(request);
  ASSERT_TRUE(plan.ok());
  // Each half of a cut layer carries 0.5 s a pass of overhead: no cut pays for itself.
  auto cut = cut_layers_at_boundaries(request, *plan, quarter_heads(0.5), kLayers);
  ASSERT_TRUE(cut.ok()) << cut.status().message();
  EXPECT_TRUE(cut->cuts.empty());
  EXPECT_EQ(cut->plan.stages, plan->stages);
  EXPECT_EQ(cut->profile.blocks.size(), request.profile.blocks.size());
  EXPECT_DOUBLE_EQ(cut->plan.iteration_s, plan->iteration_s);
  EXPECT_EQ(cut->plan.exact, plan->exact);
  EXPECT_DOUBLE_EQ(cut->plan.mapping_lower_bound_s, plan->mapping_lower_bound_s);
  // Nor are blocks cut that are not listed as layers.
  auto none = cut_layers_at_boundaries(request, *plan, quarter_heads(0), {"embedding"});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->cuts.empty());
}

TEST(CutLayersAtBoundaries, RespectsTheMemoryCap) {
  PlanRequest request = two_ranks(three_layers());
  auto plan = make_plan(request);
  ASSERT_TRUE(plan.ok());
  // A front whose stash is huge would put stage 0 over any cap that the whole plan fits.
  LayerSplitCosts heavy = quarter_heads(0);
  heavy.front_first.stash_bytes = heavy.front_last.stash_bytes = std::int64_t{1} << 40;
  request.memory_cap_bytes = *std::max_element(plan->peak_memory_bytes.begin(),
                                               plan->peak_memory_bytes.end()) * 2;
  auto cut = cut_layers_at_boundaries(request, *plan, heavy, kLayers);
  ASSERT_TRUE(cut.ok()) << cut.status().message();
  // Every cut puts a front, and its stash, on one of the two ranks: none is kept.
  EXPECT_TRUE(cut->cuts.empty());
  EXPECT_EQ(cut->plan.stages, plan->stages);
}

TEST(CutLayersAtBoundaries, StopsAtTheSimulationBudget) {
  PlanRequest request = two_ranks(three_layers());
  auto plan = make_plan(request);
  ASSERT_TRUE(plan.ok());
  // Not enough for one boundary's six tries.
  request.limits.simulation_budget =
      5 * static_cast<std::int64_t>(plan->stages.size()) * plan->microbatches;
  auto cut = cut_layers_at_boundaries(request, *plan, quarter_heads(0), kLayers);
  ASSERT_TRUE(cut.ok()) << cut.status().message();
  EXPECT_TRUE(cut->cuts.empty());
  EXPECT_NE(cut->plan.explanation.find("layer cuts tried at 0 of the 1 stage boundaries: the "
                                       "simulation budget is spent"),
            std::string::npos)
      << cut->plan.explanation;
  // A plan the planner could only bound is left as it is.
  Plan bounded = *plan;
  bounded.simulated = false;
  request.limits.simulation_budget = std::int64_t{1} << 18;
  auto kept = cut_layers_at_boundaries(request, bounded, quarter_heads(0), kLayers);
  ASSERT_TRUE(kept.ok());
  EXPECT_TRUE(kept->cuts.empty());
}

TEST(CutLayersAtBoundaries, RefusesCostsWithoutTwoHeads) {
  const PlanRequest request = two_ranks(three_layers());
  auto plan = make_plan(request);
  ASSERT_TRUE(plan.ok());
  LayerSplitCosts one = quarter_heads(0);
  one.heads = 1;
  auto cut = cut_layers_at_boundaries(request, *plan, one, kLayers);
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.status().message(), "planner: a layer with 1 head(s) cannot be cut between heads");
}

}  // namespace
}  // namespace spw::sched
