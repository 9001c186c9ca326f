// The evaluation schedule (make_evaluation): every generator's forwards alone, proven by the
// validator and timed by the simulator; and the validator's rules for DropStash and for
// forward-only schedules, checked by message.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "partition/generators.hpp"
#include "partition/offload_pass.hpp"
#include "partition/simulator.hpp"
#include "partition/validator.hpp"
#include "validation_test_support.hpp"

namespace spw::sched {
namespace {

using I = Instruction;

struct Case {
  std::string generator;
  ScheduleShape shape;
};

std::vector<Case> every_generator() {
  std::vector<Case> cases;
  for (const char* name : {"gpipe", "1f1b", "zb-h1", "pipefb"}) {
    for (int P : {1, 2, 4}) {
      for (int m : {1, 3, 8}) {
        for (bool dp : {false, true}) cases.push_back({name, {P, m, 1, dp}});
      }
    }
  }
  for (int P : {2, 4}) {
    for (int v : {2, 3}) cases.push_back({"interleaved-1f1b", {P, 2 * P, v, false}});
  }
  return cases;
}

std::string describe(const Case& c) {
  return c.generator + " P=" + std::to_string(c.shape.ranks) +
         " m=" + std::to_string(c.shape.microbatches) + " v=" + std::to_string(c.shape.chunks) +
         (c.shape.data_parallel ? " dp" : "");
}

CostModel unit_costs() {
  CostModel costs;
  costs.stages = {StageCost{}};
  costs.stages[0].forward_s = costs.stages[0].backward_input_s =
      costs.stages[0].backward_weight_s = 1;
  return costs;
}

TEST(EvaluationSchedule, EveryGeneratorsForwardsValidateWithEachStashDropped) {
  for (const Case& c : every_generator()) {
    auto training = make_schedule(c.generator, c.shape);
    ASSERT_TRUE(training.ok()) << describe(c) << ": " << training.status().message();
    auto evaluation = make_evaluation(*training);
    ASSERT_TRUE(evaluation.ok()) << describe(c) << ": " << evaluation.status().message();
    EXPECT_TRUE(evaluation->forward_only);
    EXPECT_FALSE(evaluation->data_parallel);
    EXPECT_EQ(evaluation->placement, training->placement);
    auto report = validate(*evaluation);
    ASSERT_TRUE(report.ok()) << describe(c) << ": " << report.status().message() << "\n"
                             << to_string(*evaluation);
    int forwards = 0, drops = 0;
    for (int rank = 0; rank < evaluation->ranks; ++rank) {
      const auto& list = evaluation->lists[static_cast<std::size_t>(rank)];
      // The forwards keep their training order.
      std::vector<I> trained_forwards, evaluated_forwards;
      for (const I& in : training->lists[static_cast<std::size_t>(rank)]) {
        if (in.op == Op::forward) trained_forwards.push_back(in);
      }
      for (const I& in : list) {
        EXPECT_TRUE(in.op == Op::forward || in.op == Op::send_act || in.op == Op::recv_act ||
                    in.op == Op::drop_stash)
            << describe(c) << ": " << to_string(in);
        if (in.op == Op::forward) evaluated_forwards.push_back(in);
        drops += in.op == Op::drop_stash ? 1 : 0;
      }
      EXPECT_EQ(evaluated_forwards, trained_forwards) << describe(c) << " rank " << rank;
      forwards += static_cast<int>(evaluated_forwards.size());
      // Nothing is kept for a backward: a rank holds at most the stashes of forwards whose
      // outputs are still on their way, never more than its training schedule did.
      EXPECT_LE(report->max_live_stashes[static_cast<std::size_t>(rank)],
                validate(*training)->max_live_stashes[static_cast<std::size_t>(rank)])
          << describe(c) << " rank " << rank;
    }
    EXPECT_EQ(forwards, c.shape.microbatches * training->stages()) << describe(c);
    EXPECT_EQ(drops, forwards) << describe(c);
  }
}

TEST(EvaluationSchedule, PipefbBackwardRanksHaveNothingToDo) {
  auto evaluation = make_evaluation(*make_pipefb({3, 4, 1, false}));
  ASSERT_TRUE(evaluation.ok()) << evaluation.status().message();
  ASSERT_EQ(evaluation->ranks, 6);
  for (int rank = 3; rank < 6; ++rank) {
    EXPECT_TRUE(evaluation->lists[static_cast<std::size_t>(rank)].empty()) << rank;
  }
}

TEST(EvaluationSchedule, DropsEachStashOnceItsOutputIsHandedOn) {
  // 1F1B, P = 2, m = 2: rank 0 sends each output on, rank 1 computes the loss.
  auto evaluation = make_evaluation(*make_1f1b({2, 2, 1, false}));
  ASSERT_TRUE(evaluation.ok());
  EXPECT_EQ(evaluation->lists[0],
            (std::vector<I>{I::forward(0, 0), I::send_act(0, 0, 1), I::drop_stash(0, 0),
                            I::forward(1, 0), I::send_act(1, 0, 1), I::drop_stash(1, 0)}));
  EXPECT_EQ(evaluation->lists[1],
            (std::vector<I>{I::recv_act(0, 0, 0), I::forward(0, 0), I::drop_stash(0, 0),
                            I::recv_act(1, 0, 0), I::forward(1, 0), I::drop_stash(1, 0)}));
  EXPECT_EQ(to_string(I::drop_stash(1, 0)), "DS1.0");
  EXPECT_STREQ(op_name(Op::drop_stash), "DropStash");
}

TEST(EvaluationSchedule, OffloadInstructionsAreLeftOut) {
  auto training = make_1f1b({4, 8, 1, false});
  ASSERT_TRUE(training.ok());
  auto offloaded = insert_offload(*training, {1, 1});
  ASSERT_TRUE(offloaded.ok()) << offloaded.status().message();
  auto plain = make_evaluation(*training);
  auto from_offloaded = make_evaluation(*offloaded);
  ASSERT_TRUE(plain.ok() && from_offloaded.ok());
  EXPECT_EQ(from_offloaded->lists, plain->lists);
}

TEST(EvaluationSchedule, TheSimulatorTimesItAsTheForwardsAlone) {
  // GPipe, P = 3, m = 4, a unit forward: the last forward ends at P + m - 1.
  auto evaluation = make_evaluation(*make_gpipe({3, 4, 1, false}));
  ASSERT_TRUE(evaluation.ok());
  auto simulation = simulate(*evaluation, unit_costs());
  ASSERT_TRUE(simulation.ok()) << simulation.status().message();
  EXPECT_DOUBLE_EQ(simulation->iteration_s, 6.0);
  for (double busy : simulation->busy_s) EXPECT_DOUBLE_EQ(busy, 4.0);
}

TEST(EvaluationSchedule, AnEvaluationIsNotEvaluatedAgain) {
  auto evaluation = make_evaluation(*make_1f1b({2, 2, 1, false}));
  ASSERT_TRUE(evaluation.ok());
  auto again = make_evaluation(*evaluation);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().message(), "schedule '1f1b (evaluation)' is already an evaluation");
}

Schedule two_by_two_evaluation() { return *make_evaluation(*make_1f1b({2, 2, 1, false})); }

TEST(EvaluationValidator, ATrainingScheduleKeepsEveryStash) {
  Schedule s = *make_1f1b({2, 2, 1, false});
  auto& list = s.lists[1];
  list.insert(list.begin() + 2, I::drop_stash(0, 0));  // after RA0.0 F0.0
  EXPECT_EQ(rejection(s),
            "rank 1 [2] DS0.0: a training schedule's backward needs every stash it keeps");
}

TEST(EvaluationValidator, ABackwardInAnEvaluationIsNamed) {
  Schedule s = two_by_two_evaluation();
  s.lists[1].insert(s.lists[1].begin() + 2, I::backward_input(0, 0));
  EXPECT_EQ(rejection(s), "rank 1 [2] B0.0: an evaluation runs forwards only (F, SA, RA, DS)");
}

TEST(EvaluationValidator, DroppingBeforeTheSendNamesTheSend) {
  Schedule s = two_by_two_evaluation();
  std::swap(s.lists[0][1], s.lists[0][2]);  // F0.0 DS0.0 SA0.0>1
  EXPECT_EQ(rejection(s), "rank 0 [1] DS0.0: drops the output of F0.0 before SA0.0 sends it");
}

TEST(EvaluationValidator, DroppingBeforeTheForwardOrTwiceIsNamed) {
  Schedule early = two_by_two_evaluation();
  early.lists[1].insert(early.lists[1].begin(), I::drop_stash(1, 0));
  EXPECT_EQ(rejection(early), "rank 1 [0] DS1.0: runs before F1.0");
  Schedule twice = two_by_two_evaluation();
  twice.lists[1].push_back(I::drop_stash(1, 0));
  EXPECT_EQ(rejection(twice), "rank 1 [6] DS1.0: no stash of F1.0 to drop (dropped twice?)");
}

TEST(EvaluationValidator, AStashNeverDroppedIsNamed) {
  Schedule s = two_by_two_evaluation();
  s.lists[1].pop_back();
  EXPECT_EQ(rejection(s), "rank 1: the stash of F1.0 is never dropped (no DS1.0)");
}

TEST(EvaluationValidator, AMissingForwardIsNamed) {
  Schedule s = two_by_two_evaluation();
  s.lists[1].erase(s.lists[1].begin() + 4, s.lists[1].end());  // RA1.0 stays, F1.0 goes
  EXPECT_EQ(rejection(s), "rank 1: F1.0 never runs");
}

}  // namespace
}  // namespace spw::sched
