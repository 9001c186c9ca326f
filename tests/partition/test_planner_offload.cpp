// The planner's offload policy: what a tier costs (copy times, staging buffers, peer windows
// on the lender, the partner the executor picks), and plans that offload exactly when the
// cap needs it.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "partition/generators.hpp"
#include "partition/planner.hpp"
#include "partition/planner_offload.hpp"

namespace spw::sched {
namespace {

constexpr std::int64_t KiB = 1024, MiB = std::int64_t{1} << 20;

PipelineLayout two_stages(const std::string& schedule, OffloadTier tier) {
  PipelineLayout l;
  l.schedule = schedule;
  l.pipeline_ranks = 2;
  l.microbatches = 4;
  l.stages = {{0, 0}, {1, 1}};
  l.world_rank = schedule == "pipefb" ? std::vector<int>{0, 1, 2, 3} : std::vector<int>{0, 1};
  l.offload = {tier, 0, 1};
  return l;
}

TEST(PlannerOffload, PeerPartnersAreTheExecutorsMirrorOrNextReplica) {
  PipelineLayout l = two_stages("1f1b", OffloadTier::peer);
  EXPECT_EQ(peer_partner(l, 0, 0), 1);
  EXPECT_EQ(peer_partner(l, 0, 1), 0);
  // Three lists: the middle one is its own mirror; with replicas it borrows from the next.
  l.pipeline_ranks = 3;
  l.stages = {{0, 0}, {1, 1}, {2, 2}};
  l.world_rank = {0, 1, 2};
  EXPECT_EQ(peer_partner(l, 0, 1), -1);
  EXPECT_EQ(check_offload(l).message(),
            "layout: the peer offload tier needs a partner rank for every rank, and rank 1 of a "
            "pipeline of 3 without replicas has none: use the file tier or another layout");
  l.replicas = 2;
  EXPECT_EQ(peer_partner(l, 0, 1), 4);
  EXPECT_EQ(peer_partner(l, 1, 1), 1);
  EXPECT_TRUE(check_offload(l).ok());
  // PipeFB: a backward rank borrows from its stage's forward rank; forward ranks borrow none.
  const PipelineLayout fb = two_stages("pipefb", OffloadTier::peer);
  EXPECT_EQ(peer_partner(fb, 0, 2), 0);
  EXPECT_EQ(peer_partner(fb, 0, 3), 1);
  EXPECT_EQ(peer_partner(fb, 0, 0), -1);
  EXPECT_TRUE(check_offload(fb).ok());
  l.offload.tier = OffloadTier::host;
  EXPECT_NE(check_offload(l).message().find("the host offload tier is not modelled"),
            std::string::npos);
}

TEST(PlannerOffload, ReservedBytesAreStagingOnEveryRankOrWindowsOnTheLender) {
  std::vector<StageCost> stages(2);
  stages[0].stash_bytes = MiB + 1;   // staging rounds up to 64 KiB
  stages[1].stash_bytes = 10 * MiB;  // and stops at 4 MiB
  const PipelineLayout file = two_stages("1f1b", OffloadTier::file);
  EXPECT_EQ(offload_reserved_bytes(file, stages, {2, 1}),
            (std::vector<std::int64_t>{MiB + 64 * KiB, 4 * MiB}));
  stages[0].stash_bytes = 1000;  // at least 64 KiB
  EXPECT_EQ(offload_reserved_bytes(file, stages, {2, 1})[0], 64 * KiB);

  // Peer: list 0 (two stashes live at most) borrows from list 1 and the other way round;
  // each window is live stashes x (stash + 4 KiB), rounded up to 64 bytes.
  stages[0].stash_bytes = 1000;
  const PipelineLayout peer = two_stages("1f1b", OffloadTier::peer);
  EXPECT_EQ(offload_reserved_bytes(peer, stages, {2, 1}),
            (std::vector<std::int64_t>{10 * MiB + 4 * KiB, 2 * (1000 + 4 * KiB) + 48}));
  // PipeFB: the forward ranks lend to their backward ranks and borrow nothing.
  const PipelineLayout fb = two_stages("pipefb", OffloadTier::peer);
  EXPECT_EQ(offload_reserved_bytes(fb, stages, {1, 1, 1, 1}),
            (std::vector<std::int64_t>{1000 + 4 * KiB + 24, 10 * MiB + 4 * KiB, 0, 0}));
}

TEST(PlannerOffload, CopyTimesComeFromTheStorageOrThePartnersLink) {
  RankTopology t = *synthetic_topology(1, 2, {1e9, 1e-3}, {1e9, 1e-3});
  t.links[1] = {2e9, 1e-3};  // 0 -> 1 faster than 1 -> 0
  PipelineLayout l = two_stages("1f1b", OffloadTier::peer);
  CostModel c;
  c.stages.assign(2, StageCost{});
  c.stages[0].stash_bytes = c.stages[1].stash_bytes = 100'000'000;
  add_offload_costs(c, t, l, 0, {});
  EXPECT_DOUBLE_EQ(c.stages[0].offload_s, 1e-3 + 0.05);   // rank 0 puts to rank 1
  EXPECT_DOUBLE_EQ(c.stages[0].prefetch_s, 1e-3 + 0.1);   // and gets back from it
  EXPECT_DOUBLE_EQ(c.stages[1].offload_s, 1e-3 + 0.1);
  l.offload.tier = OffloadTier::file;
  add_offload_costs(c, t, l, 0, {5e8});
  EXPECT_DOUBLE_EQ(c.stages[1].offload_s, 0.2);
  EXPECT_DOUBLE_EQ(c.stages[1].prefetch_s, 0.2);
}

// Four blocks of 100 MiB of state each and a 50 MiB stash per sample on four ranks, batch 4.
// A rank cannot hold two blocks' state and the stashes that go with them, so P = 4; rank 0
// of 1F1B then holds the whole batch's stashes of block 0 (four of one sample, or fewer of
// more): 300 MiB, as every other layout has somewhere. With rank 0's stashes offloaded, one
// is back for its backward and the next forward's overlaps the copy out of the last: about
// 200 MiB plus the file tier's 4 MiB staging buffer. The peer tier would have rank 3 lend
// rank 0 a 200 MiB window.
PlanRequest four_heavy_blocks(std::int64_t cap) {
  PlanRequest q;
  q.profile.microbatch_samples = 1;
  for (int i = 0; i < 4; ++i)
    q.profile.blocks.push_back(
        {"block", 1.0, 0.5, 0.5, 50 * MiB, MiB, 25 * MiB, 25 * MiB, 50 * MiB});
  q.topology = *synthetic_topology(1, 4, {1e10, 1e-6}, {1e10, 1e-6});
  q.global_batch = 4;
  q.memory_cap_bytes = cap;
  q.offload.choose = true;
  return q;
}

TEST(PlannerOffload, ACapThatOnlyOffloadMeetsGetsAnOffloadingPlan) {
  PlanRequest q = four_heavy_blocks(250 * MiB);
  const auto plan = make_plan(q);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->pipeline_ranks, 4) << plan->explanation;
  EXPECT_EQ(plan->offload.tier, OffloadTier::file) << plan->explanation;
  for (std::int64_t peak : plan->peak_memory_bytes) EXPECT_LE(peak, *q.memory_cap_bytes);
  EXPECT_GT(plan->offload_transfer_s, 0);
  EXPECT_GE(plan->offload_exposed_s, 0);
  EXPECT_TRUE(plan->exact) << plan->explanation;
  EXPECT_NE(plan->explanation.find("offload: file, keep " + std::to_string(plan->offload.keep) +
                                   ", lookahead " + std::to_string(plan->offload.lookahead)),
            std::string::npos)
      << plan->explanation;
  // What the plan says is what its layout, offload included, simulates to.
  const auto again = predict(q.profile, q.topology, *plan, q.offload.bandwidth);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->iteration_s, plan->iteration_s);
  EXPECT_EQ(again->peak_memory_bytes, plan->peak_memory_bytes);
  EXPECT_EQ(again->offload_transfer_s, plan->offload_transfer_s);
  // A slower disk makes the same plan slower, never infeasible.
  q.offload.bandwidth.file_bytes_per_s = 1e8;
  const auto slow = make_plan(q);
  ASSERT_TRUE(slow.ok()) << slow.status().message();
  EXPECT_GT(slow->iteration_s, plan->iteration_s);

  // Without offload to choose the same cap fails, and says offload would help.
  q.offload.choose = false;
  const auto plain = make_plan(q);
  ASSERT_FALSE(plain.ok());
  EXPECT_NE(plain.status().message().find("or offload activation stashes"), std::string::npos);
}

TEST(PlannerOffload, ACapThatFitsWithoutOffloadGetsNone) {
  const auto plan = make_plan(four_heavy_blocks(std::int64_t{1} << 30));
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->offload.tier, OffloadTier::none);
  EXPECT_EQ(plan->offload_transfer_s, 0);
  EXPECT_NE(plan->explanation.find("offload: none, every rank fits without it"), std::string::npos)
      << plan->explanation;
}

TEST(PlannerOffload, NothingFitsNamesTheSmallestPeakOffloadIncluded) {
  // Below one block's state and two stashes nothing fits; the smallest peak the planner
  // found is rank 1 of P = 4 offloading to a file. (Below one stash and the staging buffer
  // it would not even simulate offloading, and name the smallest peak without.)
  const auto plan = make_plan(four_heavy_blocks(200 * MiB));
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::memory_cap);
  const std::string& text = plan.status().message();
  EXPECT_NE(text.find("the smallest peak found is 0.2"), std::string::npos) << text;
  EXPECT_NE(text.find("on pipeline rank 1 (P=4 R=1 "), std::string::npos) << text;
  EXPECT_NE(text.find(", offload file keep "), std::string::npos) << text;
  EXPECT_NE(text.find("a larger cap (offloading stashes was tried)"), std::string::npos) << text;
}

// A job that fixes its offload (offload.tier = "file" with keep and lookahead) runs every
// plan with it, so the planner prices every candidate with it, needed for the cap or not.
TEST(PlannerOffload, AFixedPolicyPricesEveryCandidate) {
  PlanRequest q = four_heavy_blocks(std::int64_t{1} << 30);  // fits without offload
  q.offload.choose = false;
  q.offload.bandwidth.file_bytes_per_s = 1e7;  // 5 s per 50 MiB stash: copies show
  const auto plain = make_plan(q);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_EQ(plain->offload.tier, OffloadTier::none);

  q.offload.fixed = {OffloadTier::file, 0, 1};
  const auto fixed = make_plan(q);
  ASSERT_TRUE(fixed.ok()) << fixed.status().message();
  EXPECT_EQ(fixed->offload, q.offload.fixed) << fixed->explanation;
  EXPECT_GT(fixed->offload_transfer_s, 0);
  EXPECT_NE(fixed->explanation.find("offload: file, keep 0, lookahead 1; "), std::string::npos)
      << fixed->explanation;
  EXPECT_NE(fixed->explanation.find("(the job's policy)"), std::string::npos)
      << fixed->explanation;
  // What the plan says is what its layout with the policy simulates to...
  const auto again = predict(q.profile, q.topology, *fixed, q.offload.bandwidth);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->iteration_s, fixed->iteration_s);
  EXPECT_GT(fixed->iteration_s, plain->iteration_s);
  // ...and the layout chosen without the policy, run with it, is no faster.
  PipelineLayout plain_with_policy = *plain;
  plain_with_policy.offload = q.offload.fixed;
  const auto priced = predict(q.profile, q.topology, plain_with_policy, q.offload.bandwidth);
  ASSERT_TRUE(priced.ok()) << priced.status().message();
  EXPECT_LE(fixed->iteration_s, priced->iteration_s);
}

// The peer tier on one rank: no layout has a partner, so nothing is planned. The error says
// so, where it used to report a memory shortfall ("no candidate was evaluated").
TEST(PlannerOffload, APeerPolicyWithoutAPartnerInAnyLayoutSaysSo) {
  PlanRequest q = four_heavy_blocks(std::int64_t{1} << 30);
  q.topology = *synthetic_topology(1, 1, {1e10, 1e-6}, {1e10, 1e-6});
  q.offload.choose = false;
  q.offload.fixed = {OffloadTier::peer, 1, 1};
  // Under a cap the layout fits without offload, and under one it does not.
  for (const std::int64_t cap : {std::int64_t{1} << 30, std::int64_t{1} << 40}) {
    q.memory_cap_bytes = cap;
    const auto plan = make_plan(q);
    ASSERT_FALSE(plan.ok()) << cap;
    EXPECT_EQ(plan.status().code(), StatusCode::invalid_argument);
    EXPECT_EQ(plan.status().message(),
              "planner: the job's offload policy (peer keep 1 lookahead 1) fits no layout of 1 "
              "rank(s): the peer offload tier needs a partner rank for every rank, and rank 0 "
              "of a pipeline of 1 without replicas has none: use the file tier or another "
              "layout");
  }
  // Two ranks give one: as replicas (each the other's partner) or as stages.
  q.topology = *synthetic_topology(1, 2, {1e10, 1e-6}, {1e10, 1e-6});
  const auto two = make_plan(q);
  ASSERT_TRUE(two.ok()) << two.status().message();
  EXPECT_EQ(two->offload, q.offload.fixed) << two->explanation;
}

TEST(PlannerOffload, AFixedPolicyIsChecked) {
  PlanRequest q = four_heavy_blocks(std::int64_t{1} << 30);
  q.offload.fixed = {OffloadTier::file, 1, 1};
  EXPECT_EQ(make_plan(q).status().message(),
            "planner: offload.fixed and offload.choose exclude each other: either the job gives "
            "the policy or the planner chooses it");
  q.offload.choose = false;
  q.offload.fixed = {OffloadTier::host, 1, 1};
  EXPECT_NE(make_plan(q).status().message().find(
                "planner: the host offload tier is not modelled"),
            std::string::npos);
  q.offload.fixed = {OffloadTier::peer, -1, 1};
  EXPECT_EQ(make_plan(q).status().message(),
            "planner: offload.fixed keep = -1 and lookahead = 1 must be >= 0");
  q.offload.fixed = {OffloadTier::file, 1, 1};
  q.offload.bandwidth.file_bytes_per_s = 0;
  EXPECT_NE(make_plan(q).status().message().find(
                "planner: offload: the file tier's bandwidth = 0.000000 bytes/s must be a "
                "positive finite number"),
            std::string::npos)
      << make_plan(q).status().message();
}

}  // namespace
}  // namespace spw::sched
