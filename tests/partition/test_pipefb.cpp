// PipeFB's lists: a small case written out, the structure of every small shape (passing
// the validator, so deadlock-free), replicas, and offloading on the backward ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "partition/generators.hpp"
#include "partition/simulator.hpp"
#include "partition/validator.hpp"

namespace spw::sched {
namespace {

using I = Instruction;

std::vector<Instruction> compute_only(const std::vector<Instruction>& list) {
  std::vector<Instruction> out;
  for (const Instruction& in : list)
    if (is_compute(in.op)) out.push_back(in);
  return out;
}

TEST(PipeFB, TwoStagesTwoMicrobatchesAsWrittenByHand) {
  auto s = make_pipefb({2, 2, 1, false});
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->ranks, 4);
  EXPECT_EQ(s->stages(), 2);
  EXPECT_EQ(s->placement, (std::vector<StagePlacement>{{0, 0, 2, 0}, {1, 0, 3, 0}}));
  const std::vector<std::vector<Instruction>> lists = {
      {I::forward(0, 0), I::send_act(0, 0, 1), I::send_stash(0, 0, 2), I::forward(1, 0),
       I::send_act(1, 0, 1), I::send_stash(1, 0, 2), I::recv_params(0, 2)},
      {I::recv_act(0, 0, 0), I::forward(0, 0), I::send_stash(0, 0, 3), I::recv_act(1, 0, 0),
       I::forward(1, 0), I::send_stash(1, 0, 3), I::recv_params(0, 3)},
      {I::recv_stash(0, 0, 0), I::recv_grad(0, 0, 3), I::backward_input(0, 0),
       I::backward_weight(0, 0), I::recv_stash(1, 0, 0), I::recv_grad(1, 0, 3),
       I::backward_input(1, 0), I::backward_weight(1, 0), I::optimizer_step(),
       I::send_params(0, 0)},
      // The last stage takes its loss gradient from the stash: no RecvGrad.
      {I::recv_stash(0, 0, 1), I::backward_input(0, 0), I::backward_weight(0, 0),
       I::send_grad(0, 0, 2), I::recv_stash(1, 0, 1), I::backward_input(1, 0),
       I::backward_weight(1, 0), I::send_grad(1, 0, 2), I::optimizer_step(),
       I::send_params(0, 1)},
  };
  EXPECT_EQ(s->lists, lists) << to_string(*s);
  EXPECT_TRUE(validate(*s).ok());
}

TEST(PipeFB, ThreeStagesWithReplicasAsWrittenByHand) {
  auto s = make_pipefb({3, 1, 1, true});
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(to_string(*s),
            "pipefb ranks=6 stages=3 m=1 v=1 data-parallel\n"
            "rank 0: F0.0    SA0.0>1 SS0.0>3 RP0<3  \n"
            "rank 1: RA0.0<0 F0.0    SA0.0>2 SS0.0>4 RP0<4  \n"
            "rank 2: RA0.0<1 F0.0    SS0.0>5 RP0<5  \n"
            "rank 3: RS0.0<0 RG0.0<4 B0.0    W0.0    RD0     OPT     SP0>0  \n"
            "rank 4: RS0.0<1 RG0.0<5 B0.0    W0.0    SG0.0>3 RD0     OPT     SP0>1  \n"
            "rank 5: RS0.0<2 B0.0    W0.0    SG0.0>4 RD0     OPT     SP0>2  \n");
}

struct Shape {
  int P;
  int m;
  bool data_parallel;
};

// Appends piece by piece: GCC 12 at -O3 warns falsely (-Wrestrict) on "literal" + string.
std::string shape_name(const testing::TestParamInfo<Shape>& info) {
  std::string name = "P";
  name += std::to_string(info.param.P);
  name += "_m";
  name += std::to_string(info.param.m);
  if (info.param.data_parallel) name += "_dp";
  return name;
}

std::vector<Shape> shapes() {
  std::vector<Shape> out;
  for (int P : {1, 2, 3})
    for (int m = 1; m <= 8; ++m)
      for (bool dp : {false, true}) out.push_back({P, m, dp});
  return out;
}

class EveryPipeFB : public testing::TestWithParam<Shape> {};

TEST_P(EveryPipeFB, ForwardRanksStreamForwardsAndShipEachStash) {
  const auto [P, m, dp] = GetParam();
  auto s = make_pipefb({P, m, 1, dp});
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_EQ(s->ranks, 2 * P);
  for (int stage = 0; stage < P; ++stage) {
    EXPECT_EQ(s->placement_of(stage), (StagePlacement{stage, 0, P + stage, 0}));
    const auto& list = s->lists[static_cast<std::size_t>(stage)];
    std::vector<Instruction> expected;
    for (int mb = 0; mb < m; ++mb) {
      if (stage > 0) expected.push_back(I::recv_act(mb, 0, stage - 1));
      expected.push_back(I::forward(mb, 0));
      if (stage + 1 < P) expected.push_back(I::send_act(mb, 0, stage + 1));
      expected.push_back(I::send_stash(mb, 0, P + stage));
    }
    expected.push_back(I::recv_params(0, P + stage));
    EXPECT_EQ(list, expected) << to_string(*s);
  }
}

TEST_P(EveryPipeFB, BackwardRanksRunEveryBackwardInOrderThenStepAndSendTheParameters) {
  const auto [P, m, dp] = GetParam();
  auto s = make_pipefb({P, m, 1, dp});
  ASSERT_TRUE(s.ok()) << s.status().message();
  for (int stage = 0; stage < P; ++stage) {
    const int rank = P + stage;
    const auto& list = s->lists[static_cast<std::size_t>(rank)];
    std::vector<Instruction> passes;
    for (int mb = 0; mb < m; ++mb) {
      passes.push_back(I::backward_input(mb, 0));
      passes.push_back(I::backward_weight(mb, 0));
    }
    EXPECT_EQ(compute_only(list), passes);
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (list[i].op != Op::backward_input) continue;
      // Right before B: the stash from F_s, then the gradient from B_{s+1} if there is one.
      const int mb = list[i].mb;
      const std::size_t stash_at = stage + 1 < P ? i - 2 : i - 1;
      EXPECT_EQ(list[stash_at], I::recv_stash(mb, 0, stage)) << to_string(*s);
      if (stage + 1 < P) {
        EXPECT_EQ(list[i - 1], I::recv_grad(mb, 0, rank + 1));
      }
    }
    ASSERT_GE(list.size(), 3U);
    EXPECT_EQ(list[list.size() - 1], I::send_params(0, stage));
    EXPECT_EQ(list[list.size() - 2], I::optimizer_step());
    EXPECT_EQ(list[list.size() - 3],
              dp ? I::reduce_grads(0)
                 : stage > 0 ? I::send_grad(m - 1, 0, rank - 1) : I::backward_weight(m - 1, 0));
  }
}

TEST_P(EveryPipeFB, PassesTheValidatorWithOneStashPerRank) {
  const auto [P, m, dp] = GetParam();
  auto s = make_pipefb({P, m, 1, dp});
  ASSERT_TRUE(s.ok()) << s.status().message();
  auto report = validate(*s);
  ASSERT_TRUE(report.ok()) << report.status().message() << "\n" << to_string(*s);
  EXPECT_EQ(report->max_live_stashes, std::vector<int>(static_cast<std::size_t>(2 * P), 1));
  EXPECT_EQ(report->max_resident_stashes, report->max_live_stashes);
}

INSTANTIATE_TEST_SUITE_P(Shapes, EveryPipeFB, testing::ValuesIn(shapes()), shape_name);

// What an offload pass does on any rank: Offload right after the stash arrives, Prefetch
// right before its B. On a backward rank the stash arrives with RecvStash, not with F.
Schedule offload_every_stash(Schedule s) {
  for (int rank = 0; rank < s.ranks; ++rank) {
    std::vector<Instruction> out;
    for (const Instruction& in : s.lists[static_cast<std::size_t>(rank)]) {
      if (in.op == Op::backward_input) out.push_back(I::prefetch(in.mb, in.chunk));
      out.push_back(in);
      if (is_stash_arrival(s, rank, in)) out.push_back(I::offload(in.mb, in.chunk));
    }
    s.lists[static_cast<std::size_t>(rank)] = out;
  }
  return s;
}

TEST(PipeFB, OffloadOnTheBackwardRanksIsValidAndTimed) {
  auto base = make_pipefb({2, 3, 1, true});
  ASSERT_TRUE(base.ok()) << base.status().message();
  const Schedule s = offload_every_stash(*base);
  for (int rank = 0; rank < 2; ++rank)
    for (const Instruction& in : s.lists[static_cast<std::size_t>(rank)])
      EXPECT_NE(in.op, Op::offload) << "forward ranks send their stashes instead";
  EXPECT_EQ(s.lists[3][0], I::recv_stash(0, 0, 1));
  EXPECT_EQ(s.lists[3][1], I::offload(0, 0));
  EXPECT_EQ(s.lists[3][2], I::prefetch(0, 0));
  auto report = validate(s);
  ASSERT_TRUE(report.ok()) << report.status().message() << "\n" << to_string(s);
  EXPECT_EQ(report->max_live_stashes, (std::vector<int>{1, 1, 1, 1}));

  // One stage, m = 2, F = 2, B = W = 1, offload and prefetch 0.5 each: the stash of
  // microbatch 0 arrives at 2, goes out 2-2.5 and back 2.5-3, so B0 starts at 3; RS1 is
  // reached at 5 (after W0), OF1 5-5.5, PF1 5.5-6, B1 6-7, W1 7-8.
  CostModel costs;
  costs.stages = {StageCost{}};
  costs.stages[0].forward_s = 2;
  costs.stages[0].backward_input_s = costs.stages[0].backward_weight_s = 1;
  costs.stages[0].offload_s = costs.stages[0].prefetch_s = 0.5;
  auto sim = simulate(offload_every_stash(*make_pipefb({1, 2, 1, false})), costs);
  ASSERT_TRUE(sim.ok()) << sim.status().message();
  const auto& line = sim->timeline[1];
  const auto at = [&](const Instruction& in) {
    return *std::find_if(line.begin(), line.end(),
                         [&](const TimelineEntry& e) { return e.instruction == in; });
  };
  EXPECT_EQ(at(I::offload(0, 0)).stream, Stream::offload);
  EXPECT_DOUBLE_EQ(at(I::offload(0, 0)).start_s, 2);
  EXPECT_DOUBLE_EQ(at(I::backward_input(0, 0)).start_s, 3);
  EXPECT_DOUBLE_EQ(at(I::backward_input(1, 0)).start_s, 6);
  EXPECT_DOUBLE_EQ(sim->iteration_s, 8);
}

}  // namespace
}  // namespace spw::sched
