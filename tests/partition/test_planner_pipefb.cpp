// The planner with PipeFB among its layouts: chosen when it is predicted faster or is the
// only plan under the cap, forced and forbidden by the request's layout choice, its ranks
// mapped so a stage's forward and backward ranks share the fast link, and its costs
// (stash and parameter transfers, two ranks per stage) as the simulator has them.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "partition/generators.hpp"
#include "partition/planner.hpp"
#include "partition/planner_test_support.hpp"

namespace spw::sched {
namespace {

constexpr std::int64_t MiB = std::int64_t{1} << 20;

BlockProfile block(double forward_s, double backward_s, std::int64_t stash, std::int64_t params) {
  // B and W split the backward evenly; gradients as big as the parameters, Adam's two moments.
  return {"block", forward_s, backward_s / 2, backward_s / 2, stash, MiB, params, params,
          2 * params};
}

RankTopology fast_node(int ranks) { return *synthetic_topology(1, ranks, {1e12, 0}, {1e12, 0}); }

// Three equal blocks with F = B + W on two ranks, and a batch of 5 that two replicas cannot
// share. Classic splits the blocks 2 | 1, so one rank runs two blocks' F, B and W, 4 s per
// microbatch, 20 s in all; PipeFB runs all three forwards on one rank and all three
// backwards on the other, 3 s each: (m + 1) * 3 s = 18 s.
PlanRequest three_blocks_on_two_ranks() {
  PlanRequest q;
  q.profile.microbatch_samples = 1;
  for (int i = 0; i < 3; ++i) q.profile.blocks.push_back(block(1.0, 1.0, MiB, MiB));
  q.topology = fast_node(2);
  q.global_batch = 5;
  return q;
}

TEST(PlannerPipeFB, ChosenWhenPredictedFaster) {
  PlanRequest q = three_blocks_on_two_ranks();
  const auto plan = make_plan(q);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->schedule, "pipefb") << plan->explanation;
  EXPECT_EQ(plan->pipeline_ranks, 1);
  EXPECT_EQ(plan->ranks_in_pipeline(), 2);
  EXPECT_EQ(plan->microbatches, 5);
  EXPECT_NEAR(plan->iteration_s, 18.0, 1e-3) << plan->explanation;
  EXPECT_TRUE(plan->exact);
  // The explanation says why: no classic plan can be as fast.
  EXPECT_NE(plan->explanation.find("layout: pipefb, predicted 18"), std::string::npos)
      << plan->explanation;
  EXPECT_NE(plan->explanation.find("; no classic plan can take less than 20"), std::string::npos)
      << plan->explanation;

  q.layout = LayoutChoice::classic;
  const auto classic = make_plan(q);
  ASSERT_TRUE(classic.ok()) << classic.status().message();
  EXPECT_NE(classic->schedule, "pipefb");
  EXPECT_NEAR(classic->iteration_s, 20.0, 1e-3) << classic->explanation;
  EXPECT_NE(classic->explanation.find("layout: classic, as the request asks"), std::string::npos)
      << classic->explanation;
}

TEST(PlannerPipeFB, ForcedEvenWhenClassicIsFaster) {
  PlanRequest q = three_blocks_on_two_ranks();
  q.global_batch = 4;  // two replicas now share the batch, with no bubble at all
  const auto automatic = make_plan(q);
  ASSERT_TRUE(automatic.ok()) << automatic.status().message();
  EXPECT_NE(automatic->schedule, "pipefb") << automatic->explanation;
  EXPECT_EQ(automatic->replicas, 2) << automatic->explanation;
  EXPECT_NE(automatic->explanation.find("; no pipefb plan can take less than"), std::string::npos)
      << automatic->explanation;

  q.layout = LayoutChoice::pipefb;
  const auto forced = make_plan(q);
  ASSERT_TRUE(forced.ok()) << forced.status().message();
  EXPECT_EQ(forced->schedule, "pipefb");
  EXPECT_GT(forced->iteration_s, automatic->iteration_s);
  EXPECT_NE(forced->explanation.find("layout: pipefb, as the request asks"), std::string::npos)
      << forced->explanation;
  // The plan is what predict says of its layout: 2 lists, both ranks of the topology.
  const auto again = predict(q.profile, q.topology, *forced);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->iteration_s, forced->iteration_s);
  EXPECT_EQ(again->peak_memory_bytes, forced->peak_memory_bytes);
  EXPECT_EQ(forced->peak_memory_bytes.size(), 2u);
}

// Two blocks with a 50 MiB stash per sample and 4 MiB of state on two ranks, a batch of 9
// that no replicas can share, GPipe the only classic schedule, and receives posted when
// reached. Classic GPipe on P = 2 keeps a slot per microbatch on both ranks: 0.46 GiB at
// least (m = 3 of 3 samples). PipeFB's forward rank keeps each stash (both blocks' saved
// state and the first block's output, 101 MiB) until its backward rank has taken it and a
// test has seen the send complete: 3, which is also the most it may hold (two waiting
// while it computes the next, kForwardStashesWaiting), so no margin for the ranks' paces
// is added: 305 MiB with its parameters. The backward rank holds one with its gradient
// buffers, and the stage's state: 110 MiB.
PlanRequest stash_heavy_model() {
  PlanRequest q;
  q.profile.microbatch_samples = 1;
  for (int i = 0; i < 2; ++i) q.profile.blocks.push_back(block(1.0, 1.0, 50 * MiB, MiB));
  q.topology = fast_node(2);
  q.global_batch = 9;
  q.schedules = {"gpipe"};
  q.receive_lookahead = 0;
  q.memory_cap_bytes = 440 * MiB;
  return q;
}

TEST(PlannerPipeFB, ChosenWhenItIsTheOnlyLayoutUnderTheCap) {
  PlanRequest q = stash_heavy_model();
  const auto plan = make_plan(q);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->schedule, "pipefb") << plan->explanation;
  EXPECT_EQ(plan->pipeline_ranks, 1);
  EXPECT_EQ(plan->replicas, 1);
  EXPECT_EQ(plan->microbatches, 9);
  ASSERT_EQ(plan->peak_memory_bytes.size(), 2u);
  EXPECT_EQ(plan->peak_memory_bytes, (std::vector<std::int64_t>{305 * MiB, 110 * MiB}));
  EXPECT_NE(plan->explanation.find("layout: pipefb, the only kind within the memory cap: no "
                                   "classic plan fits"),
            std::string::npos)
      << plan->explanation;

  // Classic forbids it, and then nothing fits: the error names classic's smallest peak.
  q.layout = LayoutChoice::classic;
  const auto classic = make_plan(q);
  ASSERT_FALSE(classic.ok()) << classic->explanation;
  EXPECT_EQ(classic.status().code(), StatusCode::memory_cap);
  EXPECT_NE(classic.status().message().find("the smallest peak found is 0.461 GiB"),
            std::string::npos)
      << classic.status().message();
  EXPECT_NE(classic.status().message().find("on pipeline rank 0 (P=2 R=1 gpipe m=3)"),
            std::string::npos)
      << classic.status().message();

  // With the executor's default lookahead of 4 the backward rank takes 4 stashes' slots
  // early, 518 MiB, and PipeFB no longer fits either.
  q.layout = LayoutChoice::automatic;
  q.receive_lookahead = 4;
  EXPECT_FALSE(make_plan(q).ok());
}

TEST(PlannerPipeFB, AStagesForwardAndBackwardRanksShareTheFastLink) {
  PlanRequest q;
  q.profile.microbatch_samples = 1;
  q.profile.blocks = {block(1.0, 1.0, 100 * MiB, MiB), block(1.0, 1.0, 100 * MiB, MiB)};
  q.layout = LayoutChoice::pipefb;
  q.schedules = {};
  // Two nodes of two ranks, 100 GB/s inside, 100 MB/s between; ranks 1 and 2 swapped so
  // the identity mapping splits both nodes.
  q.topology = two_nodes_with_ranks_swapped(1, 2, {1e11, 1e-6}, {1e8, 1e-5});
  q.global_batch = 3;  // no replicas: P = 2 stages on the 4 ranks
  const auto plan = make_plan(q);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ASSERT_EQ(plan->pipeline_ranks, 2) << plan->explanation;
  EXPECT_TRUE(plan->exact) << plan->explanation;
  const auto node = [&](int list) {
    return q.topology.node_of[static_cast<std::size_t>(plan->world_rank_of(0, list))];
  };
  // Stage s runs forwards on list s and backwards on list 2 + s: each stage on one node,
  // so its 100 MiB stashes never cross the slow link.
  EXPECT_EQ(node(0), node(2)) << plan->explanation;
  EXPECT_EQ(node(1), node(3)) << plan->explanation;
  EXPECT_NE(node(0), node(1)) << plan->explanation;
}

TEST(PlannerPipeFB, CheckLayoutCountsTwoRanksPerStage) {
  PlanRequest q = three_blocks_on_two_ranks();
  PipelineLayout l;
  l.schedule = "pipefb";
  l.pipeline_ranks = 2;
  l.microbatches = 1;
  l.stages = {{0, 1}, {2, 2}};
  l.world_rank = {0, 1};
  const auto p = predict(q.profile, q.topology, l);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(),
            "layout: 2 ranks per stage x P * R = 2 * 2 * 1 must equal the topology's 2 ranks "
            "(every rank is used)");
  l.pipeline_ranks = 1;
  l.stages = {{0, 2}};
  const auto one = predict(q.profile, q.topology, l);
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_EQ(one->peak_memory_bytes.size(), 2u);
}

}  // namespace
}  // namespace spw::sched
