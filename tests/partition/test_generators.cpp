// Every generator over a grid of shapes passes the validator, and each keeps the structure
// its paper describes (warm-up lengths, stash counts, where reduces and sends go).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "partition/generators.hpp"
#include "partition/validator.hpp"

namespace spw::sched {
namespace {

struct Case {
  std::string generator;
  ScheduleShape shape;
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
  std::string name = info.param.generator + "_P" + std::to_string(info.param.shape.ranks) + "_m" +
                     std::to_string(info.param.shape.microbatches) + "_v" +
                     std::to_string(info.param.shape.chunks) +
                     (info.param.shape.data_parallel ? "_dp" : "");
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

std::vector<Case> grid() {
  std::vector<Case> cases;
  for (const std::string& generator : schedule_names())
    for (int P : {1, 2, 3, 4, 8})
      for (int m : {1, 2, 4, 8, 16})
        for (bool dp : {false, true}) {
          if (generator != "interleaved-1f1b") {
            cases.push_back({generator, {P, m, 1, dp}});
            continue;
          }
          if (m % P != 0) continue;
          for (int v : {2, 3}) cases.push_back({generator, {P, m, v, dp}});
        }
  return cases;
}

class EveryGenerator : public testing::TestWithParam<Case> {};

TEST_P(EveryGenerator, PassesTheValidator) {
  auto schedule = make_schedule(GetParam().generator, GetParam().shape);
  ASSERT_TRUE(schedule.ok()) << schedule.status().message();
  auto report = validate(*schedule);
  EXPECT_TRUE(report.ok()) << report.status().message() << "\n" << to_string(*schedule);
}

TEST_P(EveryGenerator, EndsWithTheStepAndReducesOnlyWithReplicas) {
  auto schedule = make_schedule(GetParam().generator, GetParam().shape);
  ASSERT_TRUE(schedule.ok()) << schedule.status().message();
  for (int rank = 0; rank < schedule->ranks; ++rank) {
    const auto& list = schedule->lists[static_cast<std::size_t>(rank)];
    ASSERT_FALSE(list.empty());
    const auto count = [&](Op op) {
      return std::count_if(list.begin(), list.end(),
                           [op](const Instruction& in) { return in.op == op; });
    };
    if (!schedule->runs_backward(rank)) {
      // A forward-only rank (PipeFB) has no gradients: it ends by taking the new weights.
      EXPECT_EQ(list.back().op, Op::recv_params) << to_string(*schedule);
      EXPECT_EQ(count(Op::optimizer_step) + count(Op::reduce_grads), 0);
      continue;
    }
    // Last but for the parameters sent on to forward-only ranks.
    auto end = list.end();
    while (end != list.begin() && (end - 1)->op == Op::send_params) --end;
    ASSERT_NE(end, list.begin());
    EXPECT_EQ(*(end - 1), Instruction::optimizer_step()) << to_string(*schedule);
    EXPECT_EQ(count(Op::reduce_grads),
              GetParam().shape.data_parallel ? schedule->chunks_on(rank) : 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Grid, EveryGenerator, testing::ValuesIn(grid()), case_name);

std::vector<Instruction> compute_only(const std::vector<Instruction>& list) {
  std::vector<Instruction> out;
  for (const Instruction& in : list)
    if (is_compute(in.op)) out.push_back(in);
  return out;
}

TEST(OneFOneB, TwoRanksTwoMicrobatchesAsWrittenByHand) {
  auto s = make_1f1b({2, 2, 1, false});
  ASSERT_TRUE(s.ok()) << s.status().message();
  using I = Instruction;
  const std::vector<Instruction> rank0 = {
      I::forward(0, 0),         I::send_act(0, 0, 1),  I::forward(1, 0),
      I::send_act(1, 0, 1),     I::recv_grad(0, 0, 1), I::backward_input(0, 0),
      I::backward_weight(0, 0), I::recv_grad(1, 0, 1), I::backward_input(1, 0),
      I::backward_weight(1, 0), I::optimizer_step()};
  const std::vector<Instruction> rank1 = {
      I::recv_act(0, 0, 0),     I::forward(0, 0),          I::backward_input(0, 0),
      I::send_grad(0, 0, 0),    I::backward_weight(0, 0),  I::recv_act(1, 0, 0),
      I::forward(1, 0),         I::backward_input(1, 0),   I::send_grad(1, 0, 0),
      I::backward_weight(1, 0), I::optimizer_step()};
  EXPECT_EQ(s->lists[0], rank0) << to_string(*s);
  EXPECT_EQ(s->lists[1], rank1) << to_string(*s);
}

TEST(OneFOneB, WarmsUpWithPMinusRankMinusOneForwards) {
  for (int m : {2, 8, 16}) {
    auto s = make_1f1b({4, m, 1, false});
    ASSERT_TRUE(s.ok()) << s.status().message();
    for (int rank = 0; rank < 4; ++rank) {
      const auto order = compute_only(s->lists[static_cast<std::size_t>(rank)]);
      const auto first_backward = std::find_if(
          order.begin(), order.end(), [](const Instruction& in) { return in.op != Op::forward; });
      EXPECT_EQ(first_backward - order.begin(), std::min(4 - rank, m)) << to_string(*s);
    }
  }
}

TEST(FusedBackwards, EveryBIsFollowedByItsWExceptInZeroBubble) {
  for (const std::string name : {"gpipe", "1f1b", "interleaved-1f1b"}) {
    auto s = make_schedule(name, {4, 8, name == "interleaved-1f1b" ? 2 : 1, true});
    ASSERT_TRUE(s.ok()) << s.status().message();
    for (const auto& list : s->lists) {
      const auto order = compute_only(list);
      for (std::size_t i = 0; i < order.size(); ++i)
        if (order[i].op == Op::backward_input) {
          ASSERT_LT(i + 1, order.size());
          EXPECT_EQ(order[i + 1], Instruction::backward_weight(order[i].mb, order[i].chunk))
              << name << "\n"
              << to_string(*s);
        }
      // The gradient leaves as soon as B has made it, before the W.
      for (std::size_t i = 1; i < list.size(); ++i)
        if (list[i].op == Op::send_grad) {
          EXPECT_EQ(list[i - 1].op, Op::backward_input) << name;
        }
    }
  }
  auto zb = make_zb_h1({4, 8, 1, false});
  ASSERT_TRUE(zb.ok()) << zb.status().message();
  for (std::size_t i = 1; i < zb->lists[3].size(); ++i)
    if (zb->lists[3][i].op == Op::send_grad) {
      EXPECT_EQ(zb->lists[3][i - 1].op, Op::backward_input);
    }
  const auto last = compute_only(zb->lists[3]);
  EXPECT_EQ(last[1], Instruction::backward_input(0, 0));
  EXPECT_EQ(last[2], Instruction::forward(1, 0)) << "the last rank defers W0.0";
}

TEST(DataParallel, EachChunkIsReducedRightAfterItsLastWeightGradient) {
  auto s = make_interleaved_1f1b({2, 4, 3, true});
  ASSERT_TRUE(s.ok()) << s.status().message();
  for (const auto& list : s->lists)
    for (int chunk = 0; chunk < 3; ++chunk) {
      std::size_t last_w = 0;
      for (std::size_t i = 0; i < list.size(); ++i)
        if (list[i].op == Op::backward_weight && list[i].chunk == chunk) last_w = i;
      std::size_t next = last_w + 1;
      while (next < list.size() && is_send(list[next].op)) ++next;
      ASSERT_LT(next, list.size());
      EXPECT_EQ(list[next], Instruction::reduce_grads(chunk)) << to_string(*s);
    }
}

TEST(Stashes, GPipeHoldsMAndOneFOneBAtMostP) {
  for (int P : {1, 2, 3, 4, 8})
    for (int m : {1, 2, 4, 8, 16}) {
      auto gpipe = validate(*make_gpipe({P, m, 1, false}));
      auto one = validate(*make_1f1b({P, m, 1, false}));
      auto zb = validate(*make_zb_h1({P, m, 1, false}));
      ASSERT_TRUE(gpipe.ok() && one.ok() && zb.ok());
      for (int rank = 0; rank < P; ++rank) {
        const auto r = static_cast<std::size_t>(rank);
        EXPECT_EQ(gpipe->max_live_stashes[r], m);
        EXPECT_EQ(one->max_live_stashes[r], std::min(P - rank, m)) << "P=" << P << " m=" << m;
        EXPECT_LE(zb->max_live_stashes[r], std::min(P, m));
      }
      EXPECT_EQ(one->max_live_stashes[0], std::min(P, m));
      // ZB-H1's peak is 1F1B's: the first rank's.
      EXPECT_EQ(*std::max_element(zb->max_live_stashes.begin(), zb->max_live_stashes.end()),
                std::min(P, m));
    }
}

TEST(Stashes, InterleavedFirstRankHoldsItsWarmUpPlusOne) {
  for (int v : {2, 3}) {
    auto report = validate(*make_interleaved_1f1b({4, 8, v, false}));
    ASSERT_TRUE(report.ok()) << report.status().message();
    EXPECT_EQ(report->max_live_stashes[0], 2 * 3 + (v - 1) * 4 + 1);
    EXPECT_EQ(report->max_live_stashes[3], (v - 1) * 4 + 1);
  }
}

TEST(InputChecks, NameTheValue) {
  const auto message = [](const Result<Schedule>& r) { return r.status().message(); };
  EXPECT_EQ(message(make_gpipe({0, 4, 1, false})), "gpipe: ranks (P) must be >= 1, got 0");
  EXPECT_EQ(message(make_1f1b({2, 0, 1, false})), "1f1b: microbatches (m) must be >= 1, got 0");
  EXPECT_EQ(message(make_zb_h1({2, 4, 2, false})), "zb-h1: chunks (v) must be 1, got 2");
  EXPECT_EQ(message(make_pipefb({2, 4, 2, false})), "pipefb: chunks (v) must be 1, got 2");
  EXPECT_EQ(message(make_pipefb({0, 4, 1, false})), "pipefb: ranks (P) must be >= 1, got 0");
  EXPECT_EQ(message(make_gpipe({2, 4, -1, false})), "gpipe: chunks (v) must be >= 1, got -1");
  EXPECT_EQ(message(make_interleaved_1f1b({4, 6, 2, false})),
            "interleaved-1f1b: microbatches (m) = 6 must be a multiple of ranks (P) = 4");
  EXPECT_EQ(message(make_interleaved_1f1b({4, 8, 1, false})),
            "interleaved-1f1b: chunks (v) must be >= 2, got 1; use 1f1b for one chunk per rank");
  auto unknown = make_schedule("pipedream", {2, 4, 1, false});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::not_found);
  EXPECT_EQ(unknown.status().message(),
            "unknown schedule 'pipedream' (known: gpipe, 1f1b, interleaved-1f1b, zb-h1, pipefb)");
}

}  // namespace
}  // namespace spw::sched
