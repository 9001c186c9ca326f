// Evaluation on the pipeline (PipelineExecutor::evaluate, the forwards of the training
// schedule alone) gives the single-rank trainer's held-out loss, before the first step and
// after later ones: bit-identical with one replica, within 1e-5 with two, for every schedule
// and PipeFB; and the training around it runs exactly as it would without it. With offload,
// the same bits again.
#include "pipeline_test_support.hpp"

namespace spw {
namespace {

constexpr int kEvalBatches = 3;

struct Shape {
  int P, R;
};

class PipelineEvaluation : public ::testing::TestWithParam<std::string> {};

TEST_P(PipelineEvaluation, MatchesTheTrainerAndLeavesTrainingAlone) {
  const std::string schedule = GetParam();
  int runs = 0;
  for (Shape shape : {Shape{1, 1}, Shape{2, 1}, Shape{4, 1}, Shape{1, 2}, Shape{2, 2}}) {
    if (ranks_needed(schedule, shape.P, shape.R) > world_size()) continue;
    const TrainSettings settings = tiny_gpt(4 * shape.R);
    const Outcome run = pipeline(settings, schedule, shape.P, shape.R, {}, kEvalBatches);
    if (world_rank() != 0) continue;
    ++runs;
    const std::string where =
        schedule + " P=" + std::to_string(shape.P) + " R=" + std::to_string(shape.R);
    const Outcome evaluated = reference(settings, kEvalBatches);
    const Outcome plain = reference(settings);
    ASSERT_TRUE(run.ok) << where << ": " << run.error;
    ASSERT_TRUE(evaluated.ok) << evaluated.error;
    // Before the first step, halfway and at the end.
    ASSERT_EQ(run.eval_loss.size(), 3u) << where;
    ASSERT_EQ(evaluated.eval_loss.size(), 3u);
    // Training moved the held-out loss.
    EXPECT_NE(evaluated.eval_loss[0], evaluated.eval_loss[1]);
    EXPECT_NE(evaluated.eval_loss[1], evaluated.eval_loss[2]);
    EXPECT_EQ(evaluated.loss, plain.loss);
    EXPECT_EQ(evaluated.weights, plain.weights);
    if (shape.R == 1) {
      EXPECT_EQ(run.eval_loss, evaluated.eval_loss) << where;
      EXPECT_EQ(run.loss, plain.loss) << where;
      EXPECT_EQ(run.weights, plain.weights) << where;
      continue;
    }
    for (std::size_t i = 0; i < 3; ++i) {
      EXPECT_NEAR(run.eval_loss[i], evaluated.eval_loss[i], 1e-5 * evaluated.eval_loss[i])
          << where << " evaluation " << i + 1;
    }
    for (const auto& [name, values] : plain.weights) {
      ASSERT_TRUE(run.weights.count(name)) << where << ": " << name;
      EXPECT_LT(max_relative(run.weights.at(name), values), 1e-5) << where << " " << name;
    }
  }
  if (world_rank() == 0) {
    EXPECT_GT(runs, 0) << "no shape of " << schedule << " fits the world";
  }
}

TEST_P(PipelineEvaluation, OffloadedRunsEvaluateToTheSameBits) {
  const std::string schedule = GetParam();
  const int P = schedule == "pipefb" ? 1 : 2;
  const TrainSettings settings = tiny_gpt(8, "adamw");
  OffloadConfig file;
  file.tier = OffloadTier::file;
  file.keep = 0;
  file.verify = true;
  const Outcome resident = pipeline(settings, schedule, P, 1, {}, kEvalBatches);
  const Outcome offloaded = pipeline(settings, schedule, P, 1, file, kEvalBatches);
  if (world_rank() != 0) return;
  ASSERT_TRUE(resident.ok) << resident.error;
  ASSERT_TRUE(offloaded.ok) << offloaded.error;
  ASSERT_EQ(offloaded.eval_loss.size(), 3u);
  EXPECT_EQ(offloaded.eval_loss, resident.eval_loss);
  EXPECT_EQ(offloaded.loss, resident.loss);
  EXPECT_GT(offloaded.bytes_evicted, 0);
}

// Under a memory cap that only offloading lets training meet, evaluations fit too: they
// keep no stash for a backward, so they hold less than a training step.
TEST(PipelineEvaluationUnderCap, EvaluatesWithinTheCapOffloadTrainsIn) {
  TrainSettings settings = tiny_gpt(8, "adamw");
  const Outcome free_run = pipeline(settings, "gpipe", 2, 1, {}, kEvalBatches);
  const std::size_t cap = cap_that_needs_offload(free_run);
  settings.memory_cap = cap;
  OffloadConfig file;
  file.tier = OffloadTier::file;
  file.keep = 0;
  const Outcome capped = pipeline(settings, "gpipe", 2, 1, file, kEvalBatches);
  if (world_rank() != 0) return;
  ASSERT_TRUE(free_run.ok) << free_run.error;
  ASSERT_GT(free_run.peak_bytes, cap);
  ASSERT_TRUE(capped.ok) << capped.error;
  EXPECT_LE(capped.peak_bytes, cap);
  EXPECT_EQ(capped.eval_loss, free_run.eval_loss);
  EXPECT_EQ(capped.loss, free_run.loss);
}

INSTANTIATE_TEST_SUITE_P(Schedules, PipelineEvaluation,
                         ::testing::Values("gpipe", "1f1b", "interleaved", "zb-h1", "pipefb"),
                         schedule_test_name);

// Data that cannot be evaluated on is one error, the same on every rank, and the executor
// goes on training.
TEST(PipelineEvaluationErrors, TextWithoutAHoldoutIsRefusedOnEveryRank) {
  TrainSettings settings = tiny_gpt(2);
  settings.data.source = DataKind::text;
  settings.data.path = "/usr/share/games/fortunes";
  auto executor = executor_over_world(settings);
  ASSERT_TRUE(executor.ok()) << executor.status().message();
  auto loss = (*executor)->evaluate(1);
  ASSERT_FALSE(loss.ok());
  EXPECT_EQ(loss.status().message(),
            "evaluating on text needs held-out text: set data.holdout (0.05 keeps the last 5% of "
            "the corpus out of training)");
  StepResult step;
  EXPECT_TRUE((*executor)->run_step(step).ok());
  EXPECT_EQ((*executor)->evaluate(0).status().message(),
            "an evaluation needs at least one batch, got 0");
}

}  // namespace
}  // namespace spw
