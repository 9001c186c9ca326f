#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "kernels/op_timer.hpp"
#include "runtime/op_report.hpp"

namespace spw {
namespace {

using namespace std::chrono_literals;

void run_op(KernelOp op, std::chrono::milliseconds how_long) {
  const OpTimer timer(op);
  std::this_thread::sleep_for(how_long);
}

TEST(TimeByOp, SkipsTheFirstStepAndAveragesTheRest) {
  StepOpTimes times;
  times.start_step();
  run_op(KernelOp::attention_forward, 40ms);  // first step: warm-up, not counted
  times.end_step(0.050);
  for (int step = 0; step < 2; ++step) {
    times.start_step();
    run_op(KernelOp::layernorm_forward, 20ms);
    run_op(KernelOp::layernorm_forward, 5ms);
    run_op(KernelOp::gelu_forward, 10ms);
    times.end_step(0.100);
  }
  // Ops between steps (an evaluation, say) are not a step's.
  run_op(KernelOp::gelu_backward, 5ms);

  const nlohmann::json t = time_by_op(times);
  EXPECT_EQ(t["steps"], 2);
  EXPECT_DOUBLE_EQ(t["step_seconds"].get<double>(), 0.100);
  const nlohmann::json& ops = t["ops"];
  ASSERT_EQ(ops.size(), 2u) << t.dump();
  EXPECT_EQ(ops[0]["op"], "layernorm_forward");  // the longest first
  EXPECT_EQ(ops[1]["op"], "gelu_forward");
  EXPECT_DOUBLE_EQ(ops[0]["calls_per_step"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(ops[1]["calls_per_step"].get<double>(), 1.0);
  const double layernorm = ops[0]["seconds_per_step"].get<double>();
  const double gelu = ops[1]["seconds_per_step"].get<double>();
  EXPECT_GE(layernorm, 0.025);
  EXPECT_GE(gelu, 0.010);
  EXPECT_DOUBLE_EQ(ops[0]["share_of_step"].get<double>(), layernorm / 0.100);
  EXPECT_NEAR(t["all_ops_share_of_step"].get<double>(), (layernorm + gelu) / 0.100, 1e-12);
}

TEST(TimeByOp, ARunOfOneStepReportsThatStep) {
  StepOpTimes times;
  times.start_step();
  run_op(KernelOp::embedding_forward, 5ms);
  times.end_step(0.010);
  const nlohmann::json t = time_by_op(times);
  EXPECT_EQ(t["steps"], 1);
  ASSERT_EQ(t["ops"].size(), 1u);
  EXPECT_EQ(t["ops"][0]["op"], "embedding_forward");
}

TEST(TimeByOp, TheLineNamesTheLongestOpsThenTheRest) {
  const nlohmann::json t = {
      {"steps", 3},
      {"step_seconds", 1.0},
      {"all_ops_share_of_step", 0.9},
      {"ops",
       {{{"op", "linear_forward"}, {"seconds_per_step", 0.5}, {"calls_per_step", 3.0},
         {"share_of_step", 0.5}},
        {{"op", "gelu_forward"}, {"seconds_per_step", 0.3}, {"calls_per_step", 1.0},
         {"share_of_step", 0.3}},
        {{"op", "accumulate"}, {"seconds_per_step", 0.1}, {"calls_per_step", 1.0},
         {"share_of_step", 0.1}}}}};
  EXPECT_EQ(describe_time_by_op(t, 2),
            "linear_forward 50%, gelu_forward 30%, other ops 10%, outside ops 10%");
  EXPECT_EQ(describe_time_by_op(t, 3),
            "linear_forward 50%, gelu_forward 30%, accumulate 10%, outside ops 10%");
  const nlohmann::json none = {{"steps", 1}, {"step_seconds", 1.0},
                               {"all_ops_share_of_step", 0.0}, {"ops", nlohmann::json::array()}};
  EXPECT_EQ(describe_time_by_op(none, 4), "outside ops 100%");
}

}  // namespace
}  // namespace spw
