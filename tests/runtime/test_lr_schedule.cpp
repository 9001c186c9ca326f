// The learning-rate schedule against values worked out by hand, its validation by message,
// and an optimizer stepping at the scheduled rates.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "kernels/tensor.hpp"
#include "runtime/lr_schedule.hpp"
#include "runtime/optimizer.hpp"

namespace spw {
namespace {

TEST(LrSchedule, ConstantWithoutWarmUpIsTheBaseRateAtEveryStep) {
  const LrSchedule constant;
  for (std::int64_t step : {1, 2, 100, 1000000}) {
    EXPECT_EQ(scheduled_lr(0.01, constant, step), 0.01);
  }
}

TEST(LrSchedule, WarmUpRisesLinearlyToTheBaseRate) {
  LrSchedule s;
  s.warmup_steps = 4;
  EXPECT_DOUBLE_EQ(scheduled_lr(0.8, s, 1), 0.2);
  EXPECT_DOUBLE_EQ(scheduled_lr(0.8, s, 2), 0.4);
  EXPECT_DOUBLE_EQ(scheduled_lr(0.8, s, 4), 0.8);
  EXPECT_DOUBLE_EQ(scheduled_lr(0.8, s, 5), 0.8);
}

TEST(LrSchedule, CosineFallsFromTheBaseRateToTheFloorAtDecaySteps) {
  LrSchedule s;
  s.decay = LrDecay::cosine;
  s.warmup_steps = 10;
  s.decay_steps = 110;
  s.min_lr = 0.1;
  EXPECT_DOUBLE_EQ(scheduled_lr(1.0, s, 10), 1.0);  // the warm-up's last step
  // p = 0.25, 0.5, 0.75 of the way: 0.1 + 0.9 (1 + cos(pi p)) / 2.
  EXPECT_DOUBLE_EQ(scheduled_lr(1.0, s, 35), 0.1 + 0.45 * (1 + std::cos(std::numbers::pi / 4)));
  EXPECT_DOUBLE_EQ(scheduled_lr(1.0, s, 60), 0.55);
  EXPECT_DOUBLE_EQ(scheduled_lr(1.0, s, 85),
                   0.1 + 0.45 * (1 + std::cos(3 * std::numbers::pi / 4)));
  EXPECT_DOUBLE_EQ(scheduled_lr(1.0, s, 110), 0.1);
  EXPECT_DOUBLE_EQ(scheduled_lr(1.0, s, 500), 0.1);  // held at the floor past decay_steps
}

TEST(LrSchedule, LinearFallsInEqualSteps) {
  LrSchedule s;
  s.decay = LrDecay::linear;
  s.decay_steps = 4;
  EXPECT_DOUBLE_EQ(scheduled_lr(2.0, s, 1), 1.5);
  EXPECT_DOUBLE_EQ(scheduled_lr(2.0, s, 2), 1.0);
  EXPECT_DOUBLE_EQ(scheduled_lr(2.0, s, 4), 0.0);
}

TEST(LrSchedule, ADecayNoLongerThanTheWarmUpDropsToTheFloorAfterIt) {
  LrSchedule s;
  s.decay = LrDecay::cosine;
  s.warmup_steps = 5;
  s.decay_steps = 5;
  s.min_lr = 0.25;
  EXPECT_DOUBLE_EQ(scheduled_lr(1.0, s, 5), 1.0);
  EXPECT_DOUBLE_EQ(scheduled_lr(1.0, s, 6), 0.25);
}

TEST(LrSchedule, BadFieldsAreNamed) {
  LrSchedule s;
  s.warmup_steps = -1;
  EXPECT_NE(validate_schedule(1.0, s).message().find("warmup_steps must be >= 0, got -1"),
            std::string::npos);
  s = LrSchedule{};
  s.decay_steps = -3;
  EXPECT_NE(validate_schedule(1.0, s).message().find("decay_steps must be >= 0, got -3"),
            std::string::npos);
  s = LrSchedule{};
  s.min_lr = 2.0;
  const Status above = validate_schedule(1.0, s);
  EXPECT_EQ(above.code(), StatusCode::invalid_argument);
  EXPECT_NE(above.message().find("min_lr must be finite and in [0, lr = 1.0"), std::string::npos)
      << above.message();
  s.min_lr = std::nan("");
  EXPECT_FALSE(validate_schedule(1.0, s).ok());
  s.min_lr = 0.5;
  EXPECT_TRUE(validate_schedule(1.0, s).ok());
}

// SGD without momentum moves each weight by lr_t * g: the steps show the rates used.
TEST(LrSchedule, AnOptimizerStepsAtTheScheduledRates) {
  auto value = Tensor::zeros(Shape{4}, MemoryCategory::parameters);
  auto grad = Tensor::zeros(Shape{4}, MemoryCategory::gradients);
  ASSERT_TRUE(value.ok() && grad.ok());
  for (std::int64_t i = 0; i < 4; ++i) grad->data()[i] = 1.0f;
  OptimizerSettings settings;
  settings.kind = "sgd";
  settings.lr = 0.5;
  settings.schedule.decay = LrDecay::linear;
  settings.schedule.warmup_steps = 2;
  settings.schedule.decay_steps = 6;
  settings.schedule.min_lr = 0.1;
  auto optimizer = make_optimizer(settings, {{"w", &*value, &*grad}});
  ASSERT_TRUE(optimizer.ok()) << optimizer.status().message();
  const std::vector<double> expected = {0.25, 0.5, 0.4, 0.3, 0.2, 0.1, 0.1};
  float before = 0.0f;
  for (std::size_t k = 0; k < expected.size(); ++k) {
    EXPECT_DOUBLE_EQ((*optimizer)->learning_rate(), expected[k]) << "step " << k + 1;
    ASSERT_TRUE((*optimizer)->step().ok());
    EXPECT_FLOAT_EQ(before - value->data()[0], static_cast<float>(expected[k])) << "step " << k + 1;
    before = value->data()[0];
  }
}

TEST(LrSchedule, AnOptimizerRefusesABadSchedule) {
  auto value = Tensor::zeros(Shape{2}, MemoryCategory::parameters);
  auto grad = Tensor::zeros(Shape{2}, MemoryCategory::gradients);
  ASSERT_TRUE(value.ok() && grad.ok());
  OptimizerSettings settings;
  settings.lr = 1e-3;
  settings.schedule.min_lr = 1e-2;
  auto optimizer = make_optimizer(settings, {{"w", &*value, &*grad}});
  ASSERT_FALSE(optimizer.ok());
  EXPECT_NE(optimizer.status().message().find("min_lr must be finite and in [0, lr"),
            std::string::npos);
}

}  // namespace
}  // namespace spw
