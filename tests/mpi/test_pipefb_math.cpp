// PipeFB (every stage's forwards and backwards on two ranks, the stash shipped between them)
// computes what the single-rank trainer computes: losses and weights within 1e-5 relative
// for P = 1 and 2 stages, with replicas, with the stash offloaded on the backward ranks to
// every tier this machine has (then bit-identical to the resident PipeFB run, CRC32C
// verified), with gradient clipping, and bit-identical from run to run.
#include "pipeline_test_support.hpp"

namespace spw {
namespace {

constexpr double kTolerance = 1e-5;

void expect_matches_reference(const Outcome& run, const Outcome& reference,
                              const std::string& where) {
  ASSERT_TRUE(reference.ok) << reference.error;
  ASSERT_TRUE(run.ok) << where << ": " << run.error;
  ASSERT_EQ(run.loss.size(), reference.loss.size()) << where;
  for (std::size_t i = 0; i < run.loss.size(); ++i) {
    EXPECT_NEAR(run.loss[i], reference.loss[i], kTolerance * std::abs(reference.loss[i]))
        << where << ", step " << i + 1;
  }
  ASSERT_EQ(run.weights.size(), reference.weights.size()) << where;
  for (const auto& [name, values] : reference.weights) {
    const auto found = run.weights.find(name);
    ASSERT_NE(found, run.weights.end()) << where << ": no " << name;
    EXPECT_LE(max_relative(found->second, values), kTolerance) << where << ": " << name;
  }
}

struct Shape {
  int stages;
  int replicas;
  int microbatches;  // of the whole batch
};

class PipeFbMath : public ::testing::TestWithParam<Shape> {};

TEST_P(PipeFbMath, MatchesTheSingleRankTrainer) {
  const Shape shape = GetParam();
  if (ranks_needed("pipefb", shape.stages, shape.replicas) > world_size()) {
    GTEST_SKIP() << "needs " << ranks_needed("pipefb", shape.stages, shape.replicas) << " ranks";
  }
  const TrainSettings settings = tiny_gpt(shape.microbatches);
  const Outcome expected = world_rank() == 0 ? reference(settings) : Outcome{};
  const Outcome run = pipeline(settings, "pipefb", shape.stages, shape.replicas);
  if (world_rank() != 0) return;
  const std::string where = "P=" + std::to_string(shape.stages) + " R=" +
                            std::to_string(shape.replicas) + " m=" +
                            std::to_string(shape.microbatches);
  expect_matches_reference(run, expected, where);
  if (shape.replicas > 1) {
    EXPECT_EQ(run.replica1_weights, run.weights) << where;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, PipeFbMath,
                         ::testing::Values(Shape{1, 1, 1}, Shape{1, 1, 4}, Shape{1, 1, 8},
                                           Shape{2, 1, 1}, Shape{2, 1, 4}, Shape{2, 1, 8},
                                           Shape{1, 2, 4}, Shape{1, 2, 8}),
                         [](const ::testing::TestParamInfo<Shape>& param) {
                           return "P" + std::to_string(param.param.stages) + "_R" +
                                  std::to_string(param.param.replicas) + "_m" +
                                  std::to_string(param.param.microbatches);
                         });

TEST(PipeFb, TwoRunsAreBitIdentical) {
  const int P = world_size() >= 4 ? 2 : 1;
  const TrainSettings settings = tiny_gpt(8, "adamw");
  const Outcome first = pipeline(settings, "pipefb", P, 1);
  const Outcome second = pipeline(settings, "pipefb", P, 1);
  if (world_rank() != 0) return;
  ASSERT_TRUE(first.ok) << first.error;
  ASSERT_TRUE(second.ok) << second.error;
  EXPECT_EQ(first.loss, second.loss);
  EXPECT_EQ(first.weights, second.weights);
}

// Only the backward ranks hold gradients: they alone add up the norm, in the model's order.
TEST(PipeFb, ClipsTheGradientNormAsTheTrainerDoes) {
  const int P = world_size() >= 4 ? 2 : 1;
  TrainSettings settings = tiny_gpt(4);
  settings.clip_grad_norm = 0.3;
  const Outcome expected = world_rank() == 0 ? reference(settings) : Outcome{};
  const Outcome run = pipeline(settings, "pipefb", P, 1);
  if (world_rank() != 0) return;
  expect_matches_reference(run, expected, "P=" + std::to_string(P) + " clipped");
  EXPECT_NE(reference(tiny_gpt(4)).weights, expected.weights);
}

OffloadConfig offload_to(OffloadTier tier) {
  OffloadConfig config;
  config.tier = tier;
  config.keep = 0;
  config.lookahead = 1;
  config.verify = true;
  return config;
}

TEST(PipeFb, OffloadOnTheBackwardRanksChangesNothingButMemory) {
  for (int P : {1, 2}) {
    if (ranks_needed("pipefb", P, 1) > world_size()) continue;
    const TrainSettings settings = tiny_gpt(8, "adamw");
    const Outcome resident = pipeline(settings, "pipefb", P, 1);
    const Outcome expected = world_rank() == 0 ? reference(tiny_gpt(8, "adamw")) : Outcome{};
    for (OffloadTier tier : {OffloadTier::file, OffloadTier::peer}) {
      const Outcome offloaded = pipeline(settings, "pipefb", P, 1, offload_to(tier));
      if (world_rank() != 0) continue;
      const std::string where = "P=" + std::to_string(P) + " tier " + std::string(to_string(tier));
      ASSERT_TRUE(resident.ok) << resident.error;
      ASSERT_TRUE(offloaded.ok) << where << ": " << offloaded.error;
      EXPECT_EQ(offloaded.loss, resident.loss) << where;
      EXPECT_EQ(offloaded.weights, resident.weights) << where;
      EXPECT_GT(offloaded.bytes_evicted, 0) << where;
    }
    if (world_rank() == 0) {
      expect_matches_reference(resident, expected, "P=" + std::to_string(P) + " adamw");
    }
  }
}

// The chunked head adds to its weight gradient in its forward, on PipeFB's forward rank,
// where no gradient is kept: every rank refuses the job before its first step.
TEST(PipeFb, AChunkedHeadIsRefusedOnEveryRank) {
  TrainSettings settings = tiny_gpt(4);
  settings.model.gpt.head_chunk_rows = 24;
  const Outcome run = pipeline(settings, "pipefb", 1, 1);
  if (world_rank() != 0) return;
  EXPECT_FALSE(run.ok);
  EXPECT_EQ(run.error,
            "model.head_chunk_rows computes the head's weight gradient in its forward, and this "
            "layout (PipeFB) runs the head's backward on another rank: use a classic layout, or "
            "model.head_chunk_rows = 0");
}

TEST(PipeFb, ARankCountThatCannotHostTheLayoutIsNamed) {
  // Three ranks: PipeFB with 2 stages needs 4.
  if (world_size() < 4) GTEST_SKIP() << "needs 4 ranks to try 3";
  const int rank = world_rank();
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, rank < 3 ? 0 : MPI_UNDEFINED, rank, &comm);
  if (comm == MPI_COMM_NULL) return;
  ParallelConfig parallel;
  parallel.layout = Layout::pipefb;
  parallel.stages.form = StagesSpec::Form::count;
  parallel.stages.count = 2;
  const TrainSettings settings = tiny_gpt(4);
  auto layout = make_pipeline_layout(parallel, settings.model.block_count(), settings.batch,
                                     settings.microbatches, 3);
  MPI_Comm_free(&comm);
  ASSERT_FALSE(layout.ok());
  EXPECT_NE(layout.status().message().find("launch with mpirun -n 4"), std::string::npos)
      << layout.status().message();
}

}  // namespace
}  // namespace spw
