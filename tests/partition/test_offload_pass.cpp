// The offload pass: where it puts Offload and Prefetch, that every generator's rewritten
// schedule still validates, and the bound on resident stashes that offload_pass.hpp states.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "partition/generators.hpp"
#include "partition/offload_pass.hpp"
#include "partition/validator.hpp"

namespace spw::sched {
namespace {

std::string joined(const std::vector<Instruction>& list) {
  std::string text;
  for (const Instruction& in : list) {
    if (!text.empty()) text += ' ';
    text += to_string(in);
  }
  return text;
}

Schedule offloaded(const std::string& generator, ScheduleShape shape, OffloadPolicy policy) {
  auto schedule = make_schedule(generator, shape);
  EXPECT_TRUE(schedule.ok()) << schedule.status().message();
  auto out = insert_offload(*schedule, policy);
  EXPECT_TRUE(out.ok()) << out.status().message();
  return out.ok() ? *out : Schedule{};
}

// GPipe here runs its backwards in forward order: F0..F3 B0 W0 B1 W1 ...
TEST(OffloadPass, GpipeKeepsTheLastStashAndPrefetchesOneComputeAhead) {
  // Only F3 has no forward after it before its W, so keep = 1 keeps it. Each prefetch goes
  // after the compute instruction two before its B, leaving one (lookahead) in between.
  const Schedule s = offloaded("gpipe", {1, 4, 1, false}, {1, 1});
  EXPECT_EQ(joined(s.lists[0]),
            "F0.0 OF0.0 F1.0 OF1.0 F2.0 OF2.0 PF0.0 F3.0 B0.0 PF1.0 W0.0 B1.0 PF2.0 W1.0 B2.0 "
            "W2.0 B3.0 W3.0 OPT");
}

TEST(OffloadPass, PrefetchClampsToRightAfterItsOffload) {
  // keep = 0 offloads every stash; lookahead 3 would put each prefetch before its offload,
  // so it comes straight after it.
  const Schedule s = offloaded("gpipe", {1, 2, 1, false}, {0, 3});
  EXPECT_EQ(joined(s.lists[0]), "F0.0 OF0.0 PF0.0 F1.0 OF1.0 PF1.0 B0.0 W0.0 B1.0 W1.0 OPT");
}

TEST(OffloadPass, OneFOneBOffloadsOnlyWhereForwardsOverlap) {
  // Rank 0 runs F1 inside F0..W0 and F2 inside F1..W1, so keep = 1 offloads those two and
  // keeps the last; rank 1 runs B right after each F and keeps everything. The offload
  // goes right after F, before the send of its output.
  const Schedule s = offloaded("1f1b", {2, 3, 1, false}, {1, 1});
  EXPECT_EQ(joined(s.lists[0]),
            "F0.0 OF0.0 PF0.0 SA0.0>1 F1.0 OF1.0 SA1.0>1 RG0.0<1 B0.0 W0.0 PF1.0 F2.0 SA2.0>1 "
            "RG1.0<1 B1.0 W1.0 RG2.0<1 B2.0 W2.0 OPT");
  EXPECT_EQ(joined(s.lists[1]),
            "RA0.0<0 F0.0 B0.0 SG0.0>0 W0.0 RA1.0<0 F1.0 B1.0 SG1.0>0 W1.0 RA2.0<0 F2.0 B2.0 "
            "SG2.0>0 W2.0 OPT");
}

TEST(OffloadPass, GpipeEightMicrobatchesKeepOneHoldsThreeResidentStashes) {
  const Schedule s = offloaded("gpipe", {1, 8, 1, false}, {1, 1});
  auto report = validate(s);
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_EQ(report->max_live_stashes, std::vector<int>{8});
  // The bound keep + lookahead + 1, reached: the kept F7 stash, B0's stash waiting for W0
  // and stash 1 prefetched during W0.
  EXPECT_EQ(report->max_resident_stashes, std::vector<int>{3});
  const Schedule none_kept = offloaded("gpipe", {1, 8, 1, false}, {0, 1});
  auto report0 = validate(none_kept);
  ASSERT_TRUE(report0.ok());
  EXPECT_EQ(report0->max_resident_stashes, std::vector<int>{2});
}

TEST(OffloadPass, LargeKeepChangesNothing) {
  auto schedule = make_schedule("1f1b", {4, 8, 1, false});
  ASSERT_TRUE(schedule.ok());
  auto out = insert_offload(*schedule, {4, 1});  // 1F1B overlaps at most P - 1 forwards
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out->lists, schedule->lists);
}

TEST(OffloadPass, PipeFBOffloadsOnBackwardRanksRightAfterTheStashArrives) {
  // The forward ranks' stashes leave with SS and stay as they are. On the backward ranks
  // each RS moves up to where its stash arrives: stage 0's second stash (sent at t = 2 with
  // unit costs) is there before the stage's first backward (t = 3, after stage 1's), so it
  // is received and sent out while the rank waits for its gradient.
  const Schedule s = offloaded("pipefb", {2, 2, 1, false}, {0, 1});
  auto plain = make_schedule("pipefb", {2, 2, 1, false});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(s.lists[0], plain->lists[0]);
  EXPECT_EQ(s.lists[1], plain->lists[1]);
  EXPECT_EQ(
      joined(s.lists[2]),
      "RS0.0<0 OF0.0 PF0.0 RS1.0<0 OF1.0 RG0.0<3 B0.0 PF1.0 W0.0 RG1.0<3 B1.0 W1.0 OPT SP0>0");
  // Stage 0's first stash sees the second arrive before its W; a keep of 2 offloads nothing,
  // and then nothing moves either.
  EXPECT_EQ(offload_keep_limit(*plain), 2);
  EXPECT_NE(insert_offload(*plain, {1, 1})->lists, plain->lists);
  EXPECT_EQ(insert_offload(*plain, {2, 1})->lists, plain->lists);
}

TEST(OffloadPass, KeepLimitIsTheFirstKeepThatOffloadsNothing) {
  for (const std::string name : {"gpipe", "1f1b", "zb-h1", "interleaved-1f1b"}) {
    auto schedule = make_schedule(name, {2, 4, name == "interleaved-1f1b" ? 2 : 1, false});
    ASSERT_TRUE(schedule.ok());
    const int limit = offload_keep_limit(*schedule);
    ASSERT_GT(limit, 0) << name;
    EXPECT_EQ(insert_offload(*schedule, {limit, 1})->lists, schedule->lists) << name;
    EXPECT_NE(insert_offload(*schedule, {limit - 1, 1})->lists, schedule->lists) << name;
  }
  // GPipe on one rank: stash 0 sees the other m - 1 forwards before its W.
  EXPECT_EQ(offload_keep_limit(*make_schedule("gpipe", {1, 8, 1, false})), 8);
}

TEST(OffloadPass, RejectsNegativePolicyValues) {
  auto schedule = make_schedule("gpipe", {2, 2, 1, false});
  ASSERT_TRUE(schedule.ok());
  auto out = insert_offload(*schedule, {-1, 1});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(),
            "offload pass on schedule 'gpipe': keep and lookahead must be >= 0, got keep=-1 "
            "lookahead=1");
}

TEST(OffloadPass, RejectsAScheduleThatAlreadyOffloads) {
  const Schedule once = offloaded("gpipe", {1, 2, 1, false}, {0, 1});
  auto twice = insert_offload(once, {0, 1});
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.status().message(),
            "offload pass on schedule 'gpipe': it already holds OF0.0; run the pass on a "
            "schedule without offload instructions");
}

TEST(OffloadPass, RejectsAnInvalidScheduleWithTheValidatorsMessage) {
  auto schedule = make_schedule("gpipe", {1, 2, 1, false});
  ASSERT_TRUE(schedule.ok());
  schedule->lists[0].erase(schedule->lists[0].begin());  // F1.0 B0.0 W0.0 ...: no F0.0
  auto out = insert_offload(*schedule, {1, 1});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(out.status().message(),
            "offload pass on schedule 'gpipe': rank 0 [1] B0.0: runs before F0.0");
}

// Stashes that have run B and wait for a deferred W (zero-bubble schedules), at most.
int deferred_weights(const std::vector<Instruction>& list) {
  int waiting = 0, most = 0;
  for (const Instruction& in : list) {
    if (!is_compute(in.op)) continue;  // the B's send sits between it and its W
    if (in.op == Op::backward_input) ++waiting;
    if (in.op == Op::backward_weight) --waiting;
    // A W directly after its B is not deferred.
    if (in.op == Op::backward_weight) continue;
    most = std::max(most, in.op == Op::backward_input ? waiting - 1 : waiting);
  }
  return most;
}

// The rule, checked from the output alone: everything but OF / PF keeps its order; an
// Offload directly follows its Forward exactly when `keep` or more forwards run between the
// stash's F and W; its Prefetch has min(lookahead, computes between F and B) compute
// instructions between it and B.
void check_rule(const Schedule& in, const Schedule& out, const OffloadPolicy& policy) {
  for (std::size_t r = 0; r < in.lists.size(); ++r) {
    const auto& list = out.lists[r];
    std::vector<Instruction> rest;
    std::map<std::pair<int, int>, std::vector<int>> at;  // (mb, c) -> compute index of F, B, W
    std::vector<int> forwards;
    std::map<std::pair<int, int>, int> offload_after, prefetch_computes_before;
    int computes = 0;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const Instruction& x = list[i];
      const std::pair<int, int> key{x.mb, x.chunk};
      if (x.op == Op::offload) {
        ASSERT_GT(i, 0u);
        EXPECT_EQ(list[i - 1], Instruction::forward(x.mb, x.chunk)) << joined(list);
        offload_after[key] = 1;
        continue;
      }
      if (x.op == Op::prefetch) {
        prefetch_computes_before[key] = computes;
        continue;
      }
      rest.push_back(x);
      if (!is_compute(x.op)) continue;
      at[key].push_back(computes);
      if (x.op == Op::forward) forwards.push_back(computes);
      ++computes;
    }
    EXPECT_EQ(rest, in.lists[r]);
    for (const auto& [key, passes] : at) {
      const int f = passes[0], b = passes[1], w = passes[2];
      const auto between = std::count_if(forwards.begin(), forwards.end(),
                                         [&](int x) { return x > f && x < w; });
      const bool offload = between >= policy.keep;
      EXPECT_EQ(offload_after.count(key) == 1, offload) << "rank " << r << " mb " << key.first;
      if (!offload) continue;
      ASSERT_EQ(prefetch_computes_before.count(key), 1u);
      EXPECT_EQ(b - prefetch_computes_before[key], std::min(policy.lookahead, b - f - 1))
          << "rank " << r << " mb " << key.first << ": " << joined(list);
    }
  }
}

void check_generator(const std::string& generator) {
  for (int P = 1; P <= 4; ++P)
    for (int m = 1; m <= 8; ++m) {
      const int v = generator == "interleaved-1f1b" ? 2 : 1;
      if (v > 1 && m % P != 0) continue;
      auto schedule = make_schedule(generator, {P, m, v, P % 2 == 0});
      ASSERT_TRUE(schedule.ok()) << schedule.status().message();
      auto before = validate(*schedule);
      ASSERT_TRUE(before.ok());
      for (int keep = 0; keep <= 3; ++keep)
        for (int lookahead = 1; lookahead <= 3; ++lookahead) {
          SCOPED_TRACE(generator + " P=" + std::to_string(P) + " m=" + std::to_string(m) +
                       " keep=" + std::to_string(keep) + " lookahead=" + std::to_string(lookahead));
          auto out = insert_offload(*schedule, {keep, lookahead});
          ASSERT_TRUE(out.ok()) << out.status().message();
          auto report = validate(*out);
          ASSERT_TRUE(report.ok()) << report.status().message() << "\n" << to_string(*out);
          EXPECT_EQ(report->max_live_stashes, before->max_live_stashes);
          check_rule(*schedule, *out, {keep, lookahead});
          for (int r = 0; r < P; ++r) {
            const auto ru = static_cast<std::size_t>(r);
            const int bound = keep + lookahead + 1 + deferred_weights(schedule->lists[ru]);
            EXPECT_LE(report->max_resident_stashes[ru],
                      std::min(bound, before->max_resident_stashes[ru]))
                << "rank " << r << "\n" << to_string(*out);
          }
        }
    }
}

TEST(OffloadPass, EveryGpipeShapeValidatesAndHoldsTheBound) { check_generator("gpipe"); }
TEST(OffloadPass, Every1f1bShapeValidatesAndHoldsTheBound) { check_generator("1f1b"); }
TEST(OffloadPass, EveryInterleavedShapeValidatesAndHoldsTheBound) {
  check_generator("interleaved-1f1b");
}
TEST(OffloadPass, EveryZbH1ShapeValidatesAndHoldsTheBound) { check_generator("zb-h1"); }

TEST(OffloadPass, ZbH1DeferredWeightsAreWhatTheBoundAdds) {
  // Rank 3 of 4 defers up to 3 W passes; fused schedules defer none.
  auto zb = make_schedule("zb-h1", {4, 8, 1, false});
  auto fused = make_schedule("1f1b", {4, 8, 1, false});
  ASSERT_TRUE(zb.ok() && fused.ok());
  EXPECT_EQ(deferred_weights(fused->lists[3]), 0);
  EXPECT_GT(deferred_weights(zb->lists[3]), 0);
}

}  // namespace
}  // namespace spw::sched

namespace spw::sched {
namespace {

// PipeFB: the forward rank ships every stash away and offloads none; the backward rank's
// stashes arrive with RecvStash, and keep counts the arrivals overlapping one stash.
TEST(OffloadPass, PipeFbOffloadsOnTheBackwardRankAfterEachRecvStash) {
  // One stage: stash k is sent at t = k + 1 and its B starts at 2k + 1 (B + W take twice
  // F), so each RS moves ahead of the previous microbatch's W, then of its B.
  const Schedule s = offloaded("pipefb", {1, 3, 1, false}, {0, 1});
  EXPECT_EQ(joined(s.lists[0]), "F0.0 SS0.0>1 F1.0 SS1.0>1 F2.0 SS2.0>1 RP0<1");
  EXPECT_EQ(joined(s.lists[1]),
            "RS0.0<0 OF0.0 PF0.0 B0.0 RS1.0<0 OF1.0 PF1.0 W0.0 RS2.0<0 OF2.0 B1.0 PF2.0 W1.0 "
            "B2.0 W2.0 OPT SP0>0");
  // keep = 1 keeps the last stash; stash 1 still sees stash 2 arrive before its W.
  const Schedule kept = offloaded("pipefb", {1, 3, 1, false}, {1, 1});
  EXPECT_EQ(joined(kept.lists[1]),
            "RS0.0<0 OF0.0 PF0.0 B0.0 RS1.0<0 OF1.0 PF1.0 W0.0 RS2.0<0 B1.0 W1.0 B2.0 W2.0 OPT "
            "SP0>0");
  auto plain = make_schedule("pipefb", {1, 3, 1, false});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(offload_keep_limit(*plain), 2);
  EXPECT_EQ(offloaded("pipefb", {1, 3, 1, false}, {2, 1}).lists, plain->lists);
}

TEST(OffloadPass, EveryPipeFbShapeValidates) {
  for (int P = 1; P <= 3; ++P)
    for (int m = 1; m <= 6; ++m)
      for (int keep = 0; keep <= 2; ++keep) {
        SCOPED_TRACE("P=" + std::to_string(P) + " m=" + std::to_string(m) +
                     " keep=" + std::to_string(keep));
        auto schedule = make_schedule("pipefb", {P, m, 1, P == 2});
        ASSERT_TRUE(schedule.ok()) << schedule.status().message();
        auto out = insert_offload(*schedule, {keep, 1});
        ASSERT_TRUE(out.ok()) << out.status().message();
        for (int r = 0; r < P; ++r) {  // forward ranks: untouched
          EXPECT_EQ(out->lists[static_cast<std::size_t>(r)],
                    schedule->lists[static_cast<std::size_t>(r)]);
        }
      }
}

}  // namespace
}  // namespace spw::sched
