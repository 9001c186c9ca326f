// The pipeline computes what the single-rank trainer computes: for every schedule, P in
// {1, 2, 4} pipeline ranks, R in {1, 2} replicas (P·R up to the ranks launched) and m in
// {1, 4, 8} microbatches per replica, 10 steps give the trainer's losses and weights within
// 1e-5 (also under a learning-rate schedule and with clipping), and the same run twice is
// bit-identical. Each configuration runs on the first P·R ranks of the world; the trainer
// runs on rank 0, which compares.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "pipeline_test_support.hpp"

namespace spw {
namespace {

std::vector<int> microbatch_counts() { return {1, 4, 8}; }

struct Shape {
  int P, R;
};

std::vector<Shape> shapes_that_fit() {
  std::vector<Shape> shapes;
  for (Shape s : {Shape{1, 1}, Shape{2, 1}, Shape{4, 1}, Shape{1, 2}, Shape{2, 2}}) {
    if (s.P * s.R <= world_size()) shapes.push_back(s);
  }
  return shapes;
}

bool runnable(const std::string& schedule, int P, int m) {
  // Interleaving needs the microbatches per replica to be a multiple of P (Megatron's rule).
  return schedule != "interleaved" || m % P == 0;
}

// ASSERTs here leave this helper only, never the loop of collective runs around it.
void expect_same(const Outcome& run, const Outcome& ref, int replicas, const std::string& where) {
  ASSERT_TRUE(run.ok) << where << ": " << run.error;
  ASSERT_TRUE(ref.ok) << ref.error;
  ASSERT_EQ(run.loss.size(), ref.loss.size());
  for (std::size_t i = 0; i < ref.loss.size(); ++i) {
    EXPECT_NEAR(run.loss[i], ref.loss[i], 1e-5 * std::abs(ref.loss[i]))
        << where << " step " << i + 1;
  }
  ASSERT_EQ(run.weights.size(), ref.weights.size()) << where;
  for (const auto& [name, values] : ref.weights) {
    ASSERT_TRUE(run.weights.count(name)) << where << ": " << name << " missing";
    EXPECT_EQ(run.weights.at(name).size(), values.size()) << where << " " << name;
    EXPECT_LT(max_relative(run.weights.at(name), values), 1e-5) << where << " " << name;
    // Replicas apply the same all-reduced gradient: they must stay identical.
    if (replicas > 1) {
      EXPECT_EQ(run.replica1_weights.at(name), run.weights.at(name)) << where;
    }
  }
  // The rate is a function of the step alone.
  EXPECT_EQ(run.learning_rate, ref.learning_rate) << where;
  ASSERT_EQ(run.grad_norm.size(), ref.grad_norm.size()) << where;
  for (std::size_t i = 0; i < ref.grad_norm.size(); ++i) {
    EXPECT_NEAR(run.grad_norm[i], ref.grad_norm[i], 1e-5 * ref.grad_norm[i])
        << where << " step " << i + 1;
  }
  // One replica runs the trainer's operations in the trainer's order: nothing differs.
  if (replicas == 1) {
    EXPECT_EQ(run.loss, ref.loss) << where;
    EXPECT_EQ(run.grad_norm, ref.grad_norm) << where;
    EXPECT_EQ(run.weights, ref.weights) << where;
  }
}

class PipelineMath : public ::testing::TestWithParam<std::string> {};

TEST_P(PipelineMath, MatchesTheSingleRankTrainer) {
  const std::string schedule = GetParam();
  std::map<int, Outcome> references;  // by global microbatch count, rank 0 only
  for (Shape shape : shapes_that_fit()) {
    for (int m : microbatch_counts()) {
      if (!runnable(schedule, shape.P, m)) continue;
      const TrainSettings settings = tiny_gpt(m * shape.R);
      const Outcome run = pipeline(settings, schedule, shape.P, shape.R);
      if (world_rank() != 0) continue;
      const std::string where = schedule + " P=" + std::to_string(shape.P) +
                                " R=" + std::to_string(shape.R) + " m=" + std::to_string(m);
      if (!references.count(m * shape.R)) references[m * shape.R] = reference(settings);
      expect_same(run, references[m * shape.R], shape.R, where);
    }
  }
}

// Every rank derives the rate from the step, and the executor, like the trainer, ends the
// decay at the run's last step when the job leaves decay_steps unset.
TEST_P(PipelineMath, FollowsTheLearningRateScheduleAsTheTrainerDoes) {
  const std::string schedule = GetParam();
  const Shape shape = shapes_that_fit().back();
  if (!runnable(schedule, shape.P, 4)) return;
  TrainSettings settings = tiny_gpt(4 * shape.R);
  settings.optimizer.schedule.decay = LrDecay::cosine;
  settings.optimizer.schedule.warmup_steps = 3;
  settings.optimizer.schedule.min_lr = 0.01;
  const Outcome run = pipeline(settings, schedule, shape.P, shape.R);
  if (world_rank() != 0) return;
  const Outcome ref = reference(settings);
  expect_same(run, ref, shape.R,
              schedule + " P=" + std::to_string(shape.P) + " R=" + std::to_string(shape.R) +
                  " m=4, cosine");
  // And the schedule mattered: the constant rate gives other weights.
  EXPECT_NE(reference(tiny_gpt(4 * shape.R)).weights, ref.weights);
}

// The stages add their gradients' norms in the model's order, so a clipped pipeline keeps
// the trainer's bits with one replica. A clip of 0.3 changes this run (checked below).
TEST_P(PipelineMath, ClipsTheGradientNormAsTheTrainerDoes) {
  const std::string schedule = GetParam();
  for (Shape shape : shapes_that_fit()) {
    if (shape.P == 1 || !runnable(schedule, shape.P, 4)) continue;
    TrainSettings settings = tiny_gpt(4 * shape.R);
    settings.clip_grad_norm = 0.3;
    const Outcome run = pipeline(settings, schedule, shape.P, shape.R);
    if (world_rank() != 0) continue;
    const Outcome ref = reference(settings);
    ASSERT_EQ(ref.grad_norm.size(), ref.loss.size()) << "every clipped step reports its norm";
    expect_same(run, ref, shape.R,
                schedule + " P=" + std::to_string(shape.P) + " R=" + std::to_string(shape.R) +
                    " m=4, clipped");
    EXPECT_NE(reference(tiny_gpt(4 * shape.R)).weights, ref.weights);
  }
}

TEST_P(PipelineMath, SameRunTwiceIsBitIdentical) {
  const std::string schedule = GetParam();
  const Shape shape = shapes_that_fit().back();
  const TrainSettings settings = tiny_gpt(4 * shape.R, "adamw");
  const Outcome first = pipeline(settings, schedule, shape.P, shape.R);
  const Outcome second = pipeline(settings, schedule, shape.P, shape.R);
  if (world_rank() != 0) return;
  ASSERT_TRUE(first.ok) << first.error;
  ASSERT_TRUE(second.ok) << second.error;
  EXPECT_EQ(first.loss, second.loss);
  EXPECT_EQ(first.weights, second.weights);
}

// A layer split after its first head (model.split_layers) with the stage boundary between
// its two blocks: the front's three planes travel as the activation and their gradients come
// back, and the pipeline keeps the trainer's bits with the same split. Six layers, layer 2
// split: nine blocks, so two stages cut after the front (blocks 0-3 | 4-8) and four chunks
// too (0-1 | 2-3 | 4-5 | 6-8).
TEST_P(PipelineMath, KeepsTheTrainersBitsWithALayerSplitAcrossTheBoundary) {
  const std::string schedule = GetParam();
  const Shape shape{2, 1};
  if (shape.P > world_size()) return;
  TrainSettings settings = tiny_gpt(4);
  settings.model.splits = {{2, 1}};
  const Outcome run = pipeline(settings, schedule, shape.P, shape.R);
  if (world_rank() != 0) return;
  ASSERT_TRUE(run.weights.count("blocks.2.attn.qkv_front.weight")) << run.error;
  expect_same(run, reference(settings), shape.R, schedule + " P=2 m=4, layer 2 split");
}

// The chunked head (model.head_chunk_rows) adds to head.weight's gradient in its forward, so
// the executor must zero the last step's gradients before the step's first forward, and an
// evaluation's forwards must add nothing. With the trainer's chunks (24 rows of each 32-row
// microbatch, then 8) the pipeline keeps the trainer's bits, evaluations included.
TEST_P(PipelineMath, KeepsTheTrainersBitsWithAChunkedHead) {
  const std::string schedule = GetParam();
  for (Shape shape : shapes_that_fit()) {
    if (!runnable(schedule, shape.P, 4)) continue;
    TrainSettings settings = tiny_gpt(4 * shape.R);
    settings.model.gpt.head_chunk_rows = 24;
    const Outcome run = pipeline(settings, schedule, shape.P, shape.R, {}, 1);
    if (world_rank() != 0) continue;
    const std::string where = schedule + " P=" + std::to_string(shape.P) +
                              " R=" + std::to_string(shape.R) + " m=4, head in chunks of 24";
    const Outcome ref = reference(settings, 1);
    expect_same(run, ref, shape.R, where);
    ASSERT_EQ(run.eval_loss.size(), 3u) << where;
    for (std::size_t i = 0; i < 3; ++i) {
      EXPECT_NEAR(run.eval_loss[i], ref.eval_loss[i], 1e-5 * ref.eval_loss[i]) << where;
    }
    if (shape.R == 1) {
      EXPECT_EQ(run.eval_loss, ref.eval_loss) << where;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, PipelineMath,
                         ::testing::Values("gpipe", "1f1b", "interleaved", "zb-h1"),
                         schedule_test_name);

}  // namespace
}  // namespace spw
