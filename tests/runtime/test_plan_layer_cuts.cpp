// model.split_layers = "auto": the probe model a plan is profiled on, and a plan whose cuts
// make the model the run builds, block for block.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "partition/rank_topology.hpp"
#include "runtime/auto_plan.hpp"
#include "partition/planner_test_support.hpp"

namespace spw {
namespace {

TrainSettings gpt(int layers, int heads, bool auto_cuts) {
  TrainSettings s;
  s.model.kind = "gpt";
  s.model.gpt.layers = layers;
  s.model.gpt.heads = heads;
  s.model.gpt.d_model = 16 * heads;
  s.model.gpt.seq = 16;
  s.batch = 8;
  s.microbatches = 1;
  s.split_layers_auto = auto_cuts;
  return s;
}

TEST(PlanLayerCuts, TheProbeCutsTheFirstLayerAfterOneHeadAndTheSecondBeforeTheLast) {
  EXPECT_EQ(profiled_model(gpt(4, 8, true)).splits, (std::vector<LayerSplit>{{0, 1}, {1, 7}}));
  EXPECT_EQ(profiled_model(gpt(3, 2, true)).splits, (std::vector<LayerSplit>{{0, 1}}));
  // Too few layers or heads, or not asked: the job's model.
  EXPECT_TRUE(profiled_model(gpt(2, 8, true)).splits.empty());
  EXPECT_TRUE(profiled_model(gpt(4, 1, true)).splits.empty());
  EXPECT_TRUE(profiled_model(gpt(4, 8, false)).splits.empty());
  EXPECT_TRUE(plans_layer_cuts(gpt(3, 2, true)));
  EXPECT_FALSE(plans_layer_cuts(gpt(2, 8, true)));
}

// What profiling the probe of a 3-layer, 4-head gpt would give: a front costs a quarter of a
// layer per head, the head 0.6 of a layer.
sched::ModelProfile probe_profile(const TrainSettings& settings) {
  sched::ModelProfile p;
  const ModelSpec probe = profiled_model(settings);
  p.model = probe.describe();
  for (const std::string& name : probe.block_names()) {
    double pass = 1;
    if (name == "embedding") pass = 0.01;
    if (name == "head") pass = 0.6;
    if (name == "blocks.0.front" || name == "blocks.1.back") pass = 0.25;
    if (name == "blocks.0.back" || name == "blocks.1.front") pass = 0.75;
    p.blocks.push_back(sched::uniform_block(name, pass));
  }
  return p;
}

sched::RankTopology two_ranks() {
  auto t = sched::synthetic_topology(1, 2, {1e7, 1e-6}, {1e7, 1e-6});
  EXPECT_TRUE(t.ok()) << t.status().message();
  return *t;
}

TEST(PlanLayerCuts, ThePlansBlocksAreTheBlocksOfTheModelItCuts) {
  TrainSettings settings = gpt(3, 4, true);
  auto planned = plan_model(settings, probe_profile(settings), two_ranks(), {});
  ASSERT_TRUE(planned.ok()) << planned.status().message();
  // The same job planned over whole layers, each the probe's whole layer 2.
  TrainSettings whole_layers = gpt(3, 4, false);
  sched::ModelProfile whole = probe_profile(whole_layers);
  auto unsplit = plan_model(whole_layers, whole, two_ranks(), {});
  ASSERT_TRUE(unsplit.ok()) << unsplit.status().message();
  // The stages differ by 0.4 of a layer and more with whole layers (the head weighs 0.6):
  // some boundary moves inside a layer, and the plan is predicted faster for it.
  ASSERT_FALSE(planned->splits.empty()) << planned->plan.explanation;
  EXPECT_LT(planned->plan.iteration_s, unsplit->plan.iteration_s * 0.99);
  for (const LayerSplit& cut : planned->splits) {
    EXPECT_GE(cut.front_heads, 1);
    EXPECT_LE(cut.front_heads, 3);
  }
  // The run builds the job's model with those cuts: the plan's blocks are its blocks.
  ModelSpec runs = settings.model;
  runs.splits = planned->splits;
  std::vector<std::string> planned_blocks;
  for (const auto& b : planned->profile.blocks) planned_blocks.push_back(b.name);
  EXPECT_EQ(planned_blocks, runs.block_names());
  EXPECT_EQ(planned->profile.model, settings.model.describe());
  ASSERT_FALSE(planned->plan.stages.empty());
  EXPECT_EQ(planned->plan.stages.front().first, 0);
  EXPECT_EQ(planned->plan.stages.back().last, runs.block_count() - 1);
  // The probe's cut layers 0 and 1 were read as whole layers (1 s a pass) before cutting.
  for (const auto& b : planned->profile.blocks) {
    if (b.name.rfind("blocks.", 0) == 0 && b.name.find(".front") == std::string::npos &&
        b.name.find(".back") == std::string::npos) {
      EXPECT_DOUBLE_EQ(b.forward_s, 1.0) << b.name;
    }
  }

  nlohmann::json record = {{"layout", nlohmann::json::object()}};
  record_layer_cuts(record, planned->splits);
  ASSERT_EQ(record["layout"]["split_layers"].size(), planned->splits.size());
  EXPECT_EQ(record["layout"]["split_layers"][0][0].get<std::int64_t>(),
            planned->splits[0].layer);
  EXPECT_EQ(record["layout"]["split_layers"][0][1].get<std::int64_t>(),
            planned->splits[0].front_heads);
}

TEST(PlanLayerCuts, WithoutAutoOrWithTooFewLayersThePlanKeepsTheJobsModel) {
  TrainSettings settings = gpt(3, 4, false);
  settings.model.splits = {{2, 1}};
  sched::ModelProfile measured = probe_profile(settings);  // the job's model, its split kept
  auto planned = plan_model(settings, measured, two_ranks(), {});
  ASSERT_TRUE(planned.ok()) << planned.status().message();
  EXPECT_EQ(planned->splits, settings.model.splits);
  EXPECT_EQ(planned->profile.blocks.size(), measured.blocks.size());

  TrainSettings short_model = gpt(2, 4, true);
  auto whole = plan_model(short_model, probe_profile(short_model), two_ranks(), {});
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  EXPECT_TRUE(whole->splits.empty());
  EXPECT_NE(whole->plan.explanation.find("model.split_layers = \"auto\": cutting a layer between "
                                         "heads needs a gpt of at least 3 layers and 2 heads"),
            std::string::npos)
      << whole->plan.explanation;
  nlohmann::json record = {{"layout", nlohmann::json::object()}};
  record_layer_cuts(record, whole->splits);
  EXPECT_FALSE(record["layout"].contains("split_layers"));
}

}  // namespace
}  // namespace spw
