// Gradient clipping: the norm against a long double reference and across thread counts, the
// coefficient torch's clip_grad_norm_ uses, and a trainer step that applies it.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <random>
#include <vector>

#include "runtime/grad_clip.hpp"
#include "runtime/job_config.hpp"
#include "runtime/train_command.hpp"
#include "runtime/trainer.hpp"

namespace spw {
namespace {

Tensor random_tensor(std::int64_t n, unsigned seed) {
  auto t = Tensor::zeros(Shape{n}, MemoryCategory::gradients);
  EXPECT_TRUE(t.ok());
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (std::int64_t i = 0; i < n; ++i) t->data()[i] = normal(rng);
  return std::move(t).value();
}

TEST(GradClip, SquaredNormMatchesALongDoubleSum) {
  for (std::int64_t n : {1, 7, 8, 1000, (1 << 14) + 3, 100000}) {
    const Tensor t = random_tensor(n, static_cast<unsigned>(n));
    long double sum = 0;
    for (std::int64_t i = 0; i < n; ++i) sum += static_cast<long double>(t.data()[i]) * t.data()[i];
    const double reference = static_cast<double>(sum);
    EXPECT_NEAR(squared_norm(t), reference, 1e-13 * reference) << "n = " << n;
  }
}

TEST(GradClip, SquaredNormIsTheSameAtAnyThreadCount) {
  const Tensor t = random_tensor(200003, 5);
  const int before = omp_get_max_threads();
  omp_set_num_threads(1);
  const double one = squared_norm(t);
  omp_set_num_threads(3);
  const double three = squared_norm(t);
  omp_set_num_threads(before);
  EXPECT_EQ(one, three);
}

TEST(GradClip, CoefficientIsTorchsClampedToOne) {
  EXPECT_FLOAT_EQ(clip_coefficient(4.0, 1.0), static_cast<float>(1.0 / (4.0 + 1e-6)));
  EXPECT_EQ(clip_coefficient(0.5, 1.0), 1.0f);
  // At the limit the 1e-6 still clips, by a float's width, as in torch.
  EXPECT_EQ(clip_coefficient(1.0, 1.0), static_cast<float>(1.0 / (1.0 + 1e-6)));
  EXPECT_LT(clip_coefficient(1.0, 1.0), 1.0f);
  EXPECT_EQ(clip_coefficient(1e9, 0.0), 1.0f);  // 0: no clipping
}

TEST(GradClip, ScaleGradientsMultipliesEveryGradient) {
  Tensor a = random_tensor(10, 1), b = random_tensor(3, 2);
  Tensor ga = random_tensor(10, 3), gb = random_tensor(3, 4);
  const std::vector<float> ga0(ga.data(), ga.data() + 10), gb0(gb.data(), gb.data() + 3);
  const std::vector<NamedParameter> params = {{"a", &a, &ga}, {"b", &b, &gb}};
  scale_gradients(params, 0.25f);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(ga.data()[i], ga0[static_cast<std::size_t>(i)] * 0.25f);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(gb.data()[i], gb0[static_cast<std::size_t>(i)] * 0.25f);
}

TrainSettings tiny_sgd(double clip) {
  auto job = parse_job_string(
      "[model]\nkind = \"gpt\"\nlayers = 2\nd_model = 32\nheads = 4\nseq = 16\n"
      "[data]\nsource = \"synthetic\"\n"
      "[train]\nbatch = 8\nsteps = 3\noptimizer = \"sgd\"\nlr = 0.1\n",
      "tiny.toml", {"train.clip_grad_norm=" + std::to_string(clip)});
  EXPECT_TRUE(job.ok()) << job.status().message();
  auto settings = train_settings_from(*job);
  EXPECT_TRUE(settings.ok());
  return *settings;
}

// Plain SGD moves each weight by lr g: with clipping, by lr c g, c = clip / (|g| + 1e-6).
TEST(GradClip, ATrainerStepMovesTheWeightsByTheClippedGradient) {
  auto free_run = Trainer::create(tiny_sgd(0));
  auto clipped = Trainer::create(tiny_sgd(0.05));
  ASSERT_TRUE(free_run.ok() && clipped.ok());
  std::vector<std::vector<float>> start;
  for (const auto& p : (*free_run)->model().parameters()) {
    start.emplace_back(p.value->data(), p.value->data() + p.value->numel());
  }
  StepResult step;
  ASSERT_TRUE((*free_run)->run_step(step).ok());
  EXPECT_FALSE(step.grad_norm.has_value()) << "no clipping, no norm";
  EXPECT_DOUBLE_EQ(step.learning_rate, 0.1);
  StepResult clipped_step;
  ASSERT_TRUE((*clipped)->run_step(clipped_step).ok());
  // The unclipped run's gradients are still in its model: their norm sets c.
  long double sum = 0;
  for (const auto& p : (*free_run)->model().parameters()) {
    for (std::int64_t i = 0; i < p.grad->numel(); ++i) {
      sum += static_cast<long double>(p.grad->data()[i]) * p.grad->data()[i];
    }
  }
  const double norm = std::sqrt(static_cast<double>(sum));
  ASSERT_GT(norm, 0.05) << "the test needs a gradient larger than the clip";
  ASSERT_TRUE(clipped_step.grad_norm.has_value());
  EXPECT_NEAR(*clipped_step.grad_norm, norm, 1e-9 * norm);  // before clipping, in double
  const double c = 0.05 / (norm + 1e-6);
  const auto free_params = (*free_run)->model().parameters();
  const auto clipped_params = (*clipped)->model().parameters();
  double worst = 0, largest_step = 0;
  for (std::size_t k = 0; k < start.size(); ++k) {
    for (std::int64_t i = 0; i < free_params[k].value->numel(); ++i) {
      const double w0 = start[k][static_cast<std::size_t>(i)];
      const double free_delta = free_params[k].value->data()[i] - w0;
      const double clipped_delta = clipped_params[k].value->data()[i] - w0;
      // Against the weight's size: w - lr g rounds to the float nearest, LayerNorm gains of
      // 1 to within 6e-8.
      worst = std::max(worst, std::abs(clipped_delta - c * free_delta) /
                                  std::max(std::abs(w0), 1e-2));
      largest_step = std::max(largest_step, std::abs(free_delta) / std::max(std::abs(w0), 1e-2));
    }
  }
  EXPECT_LT(worst, 1e-6);
  EXPECT_GT(largest_step, 1e-3);  // unclipped, the steps would fail the bound above
}

}  // namespace
}  // namespace spw
