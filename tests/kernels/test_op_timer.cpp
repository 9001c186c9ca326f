#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <set>
#include <string>
#include <thread>

#include "kernels/op_timer.hpp"
#include "kernels/ops/activation.hpp"
#include "kernels/ops/linear.hpp"
#include "op_test_support.hpp"

namespace spw {
namespace {

using namespace std::chrono_literals;
using testing::float_values;
using testing::tensor_from;
using testing::zeros;

// Every op but `op` made no call between the two readings.
::testing::AssertionResult only_calls_of(KernelOp op, const OpTimes& d) {
  for (std::size_t i = 0; i < kOpCount; ++i) {
    const auto other = static_cast<KernelOp>(i);
    if (other != op && d.calls_of(other) != 0) {
      return ::testing::AssertionFailure()
             << op_name(other) << " counted " << d.calls_of(other) << " calls";
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(OpTimer, NamesAreTheOpsFunctionNamesEachItsOwn) {
  std::set<std::string> names;
  for (std::size_t i = 0; i < kOpCount; ++i) {
    names.insert(std::string(op_name(static_cast<KernelOp>(i))));
  }
  EXPECT_EQ(names.size(), kOpCount);
  EXPECT_EQ(op_name(KernelOp::linear_forward), "linear_forward");
  EXPECT_EQ(op_name(KernelOp::layernorm_backward_weight), "layernorm_backward_weight");
  EXPECT_EQ(op_name(KernelOp::embedding_forward), "embedding_forward");
  EXPECT_EQ(op_name(KernelOp::accumulate), "accumulate");
  EXPECT_EQ(op_name(KernelOp::optimizer_step), "optimizer_step");
}

TEST(OpTimer, CountsOneCallAndAtLeastItsWallTime) {
  const OpTimes before = op_times();
  {
    const OpTimer timer(KernelOp::relu_backward);
    std::this_thread::sleep_for(20ms);
  }
  const OpTimes d = op_times().since(before);
  EXPECT_EQ(d.calls_of(KernelOp::relu_backward), 1);
  EXPECT_GE(d.seconds_of(KernelOp::relu_backward), 0.020);
  EXPECT_EQ(d.total_seconds(), d.seconds_of(KernelOp::relu_backward));
  EXPECT_TRUE(only_calls_of(KernelOp::relu_backward, d));
}

TEST(OpTimer, AnOpInsideAnotherCountsTowardsTheOuterOneOnly) {
  const OpTimes before = op_times();
  {
    const OpTimer outer(KernelOp::linear_backward_weight);
    std::this_thread::sleep_for(10ms);
    {
      const OpTimer inner(KernelOp::bias_backward_weight);
      std::this_thread::sleep_for(10ms);
    }
  }
  OpTimes d = op_times().since(before);
  EXPECT_EQ(d.calls_of(KernelOp::linear_backward_weight), 1);
  EXPECT_GE(d.seconds_of(KernelOp::linear_backward_weight), 0.020);
  EXPECT_TRUE(only_calls_of(KernelOp::linear_backward_weight, d));

  // Outside any op again, the inner op counts on its own.
  const OpTimes later = op_times();
  { const OpTimer alone(KernelOp::bias_backward_weight); }
  d = op_times().since(later);
  EXPECT_EQ(d.calls_of(KernelOp::bias_backward_weight), 1);
  EXPECT_TRUE(only_calls_of(KernelOp::bias_backward_weight, d));
}

TEST(OpTimer, EachThreadCountsItsOwnOutermostOps) {
  const OpTimes before = op_times();
  {
    // An op running on this thread does not hide one that another thread runs meanwhile.
    const OpTimer here(KernelOp::gelu_forward);
    std::thread other([] {
      const OpTimer there(KernelOp::gelu_backward);
      std::this_thread::sleep_for(10ms);
    });
    other.join();
  }
  const OpTimes d = op_times().since(before);
  EXPECT_EQ(d.calls_of(KernelOp::gelu_forward), 1);
  EXPECT_EQ(d.calls_of(KernelOp::gelu_backward), 1);
  EXPECT_GE(d.seconds_of(KernelOp::gelu_backward), 0.010);
  EXPECT_GE(d.seconds_of(KernelOp::gelu_forward), d.seconds_of(KernelOp::gelu_backward));
}

TEST(OpTimer, RealOpsCountThemselvesOnceWithWhatTheyCallInside) {
  const Tensor dy = tensor_from({6, 4}, float_values(24, 1));
  const Tensor x = tensor_from({6, 3}, float_values(18, 2));
  Tensor dw = zeros({4, 3});
  Tensor db = zeros({4});
  // The weight gradient adds the bias gradient through bias_backward_weight.
  OpTimes before = op_times();
  ASSERT_TRUE(ops::linear_backward_weight(dy, x, dw, &db).ok());
  OpTimes d = op_times().since(before);
  EXPECT_EQ(d.calls_of(KernelOp::linear_backward_weight), 1);
  EXPECT_GT(d.seconds_of(KernelOp::linear_backward_weight), 0);
  EXPECT_TRUE(only_calls_of(KernelOp::linear_backward_weight, d));

  // A call refused for its shapes counts too: the time went into that op.
  Tensor wrong = zeros({6, 5});
  before = op_times();
  const Status refused = ops::gelu_forward(x, wrong);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("gelu_forward"), std::string::npos) << refused.message();
  d = op_times().since(before);
  EXPECT_EQ(d.calls_of(KernelOp::gelu_forward), 1);
  EXPECT_TRUE(only_calls_of(KernelOp::gelu_forward, d));
}

TEST(OpTimes, SinceAndSumAreElementwise) {
  OpTimes a, b;
  a.seconds[2] = 3.0;
  a.calls[2] = 5;
  b.seconds[2] = 1.0;
  b.calls[2] = 2;
  b.seconds[4] = 0.5;
  b.calls[4] = 1;
  const OpTimes d = a.since(b);
  EXPECT_DOUBLE_EQ(d.seconds[2], 2.0);
  EXPECT_EQ(d.calls[2], 3);
  EXPECT_EQ(d.calls[4], -1);
  a += b;
  EXPECT_DOUBLE_EQ(a.seconds[2], 4.0);
  EXPECT_EQ(a.calls[4], 1);
  EXPECT_DOUBLE_EQ(a.total_seconds(), 4.5);
}

}  // namespace
}  // namespace spw
