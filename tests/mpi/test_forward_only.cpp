// A pipeline built for forwards only (TrainSettings::inference_only, what spillway evaluate and
// spillway sample open): every rank holds its parameters and nothing for training, evaluates
// to the trainer's loss, refuses to train, and gives the trainer's next-token logits on every
// rank for every schedule and PipeFB (PipelineExecutor::next_token_logits, the sampler's
// pass).
#include "pipeline_test_support.hpp"
#include "runtime/sampler.hpp"

namespace spw {
namespace {

// A window of seq ids with the prompt's first `length` and zeros after, as the sampler
// builds it.
std::vector<std::int32_t> window_of(const TrainSettings& settings, std::size_t length) {
  std::vector<std::int32_t> window(static_cast<std::size_t>(settings.model.gpt.seq), 0);
  for (std::size_t i = 0; i < length; ++i) {
    window[i] = static_cast<std::int32_t>((37 * i + 11) % 256);
  }
  return window;
}

// An executor of `schedule` over P stages and R replicas on the first ranks of the world,
// built for forwards only; null on the ranks left out (comm is then MPI_COMM_NULL).
struct ForwardOnly {
  MPI_Comm comm = MPI_COMM_NULL;
  std::unique_ptr<PipelineExecutor> executor;
  Status status;
  ~ForwardOnly() {
    executor.reset();
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  }
};

void open_forward_only(TrainSettings train, const std::string& schedule, int P, int R,
                       ForwardOnly& out) {
  const int ranks = ranks_needed(schedule, P, R);
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() < ranks ? 0 : MPI_UNDEFINED, world_rank(), &out.comm);
  if (out.comm == MPI_COMM_NULL) return;
  train.inference_only = true;
  PipelineSettings settings;
  settings.train = train;
  auto layout = make_pipeline_layout(parallel_config(schedule, P, R), train.model.block_count(),
                                     train.batch, train.microbatches, ranks);
  out.status = layout.status();
  if (!layout.ok()) return;
  settings.layout = *layout;
  auto executor = PipelineExecutor::create(settings, out.comm);
  out.status = executor.status();
  if (executor.ok()) out.executor = std::move(*executor);
}

class ForwardOnlyPipeline : public ::testing::TestWithParam<std::string> {};

TEST_P(ForwardOnlyPipeline, GivesTheTrainersNextTokenLogitsOnEveryRank) {
  const std::string schedule = GetParam();
  const int P = schedule == "pipefb" ? world_size() / 2 : world_size();
  const TrainSettings settings = tiny_gpt(4);
  TrainSettings one = settings;
  one.inference_only = true;
  auto trainer = Trainer::create(one);
  ASSERT_TRUE(trainer.ok()) << trainer.status().message();
  const NextTokenLogits expected = trainer_logits(**trainer);
  ForwardOnly run;
  open_forward_only(settings, schedule, P, 1, run);
  if (run.comm == MPI_COMM_NULL) return;
  ASSERT_TRUE(run.status.ok()) << run.status.message();
  for (const std::size_t length : {1u, 5u, 8u}) {
    const std::vector<std::int32_t> window = window_of(settings, length);
    auto got = run.executor->next_token_logits(window, length - 1);
    ASSERT_TRUE(got.ok()) << got.status().message();
    auto want = expected(window, length - 1);
    ASSERT_TRUE(want.ok()) << want.status().message();
    ASSERT_EQ(got->size(), 256u);
    // The same kernels on the same values in the same order: the same bits, on every rank.
    EXPECT_EQ(*got, *want) << schedule << " P=" << P << ", a window of " << length;
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, ForwardOnlyPipeline,
                         ::testing::Values("gpipe", "1f1b", "interleaved", "zb-h1", "pipefb"),
                         schedule_test_name);

// Two replicas each compute the window; replica 0's head gives the logits to all four ranks.
TEST(ForwardOnlyReplicas, EveryRankGetsReplicaZerosLogits) {
  if (world_size() < 4) GTEST_SKIP() << "needs 4 ranks";
  const TrainSettings settings = tiny_gpt(4);
  TrainSettings one = settings;
  one.inference_only = true;
  auto trainer = Trainer::create(one);
  ASSERT_TRUE(trainer.ok()) << trainer.status().message();
  ForwardOnly run;
  open_forward_only(settings, "1f1b", 2, 2, run);
  ASSERT_TRUE(run.status.ok()) << run.status.message();
  const std::vector<std::int32_t> window = window_of(settings, 6);
  auto got = run.executor->next_token_logits(window, 5);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(*got, *trainer_logits(**trainer)(window, 5));
}

TEST(ForwardOnlyPipelineState, HoldsParametersAloneEvaluatesAsTheTrainerAndRefusesToTrain) {
  const TrainSettings settings = tiny_gpt(4);
  constexpr int kBatches = 2;
  TrainSettings one = settings;
  one.inference_only = true;
  auto trainer = Trainer::create(one);
  ASSERT_TRUE(trainer.ok()) << trainer.status().message();
  const Result<double> expected = (*trainer)->evaluate(kBatches);
  ASSERT_TRUE(expected.ok()) << expected.status().message();
  (*trainer).reset();  // its memory gone before the pipeline's is counted
  MemoryLedger::process().reset_peaks();
  ForwardOnly run;
  open_forward_only(settings, "1f1b", world_size(), 1, run);
  ASSERT_TRUE(run.status.ok()) << run.status.message();
  auto loss = run.executor->evaluate(kBatches);
  ASSERT_TRUE(loss.ok()) << loss.status().message();
  EXPECT_EQ(*loss, *expected);
  const LedgerSnapshot ledger = MemoryLedger::process().snapshot();
  EXPECT_GT(ledger.peak_of(MemoryCategory::parameters), 0u);
  EXPECT_EQ(ledger.peak_of(MemoryCategory::gradients), 0u);
  EXPECT_EQ(ledger.peak_of(MemoryCategory::optimizer_state), 0u);
  EXPECT_FALSE(run.executor->owns_parameters());
  StepResult step;
  EXPECT_EQ(run.executor->run_step(step).message(),
            "this pipeline was built for forwards only (inference_only): it cannot train");
  // Still usable after the refusal.
  auto again = run.executor->evaluate(kBatches);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(*again, *loss);
}

// Requests every rank can judge alike are refused before the pass, on every rank.
TEST(ForwardOnlyPipelineErrors, AWindowOfAnotherLengthOrAChunkedHeadIsRefusedOnEveryRank) {
  const TrainSettings settings = tiny_gpt(4);
  ForwardOnly run;
  open_forward_only(settings, "1f1b", world_size(), 1, run);
  ASSERT_TRUE(run.status.ok()) << run.status.message();
  EXPECT_EQ(run.executor->next_token_logits(std::vector<std::int32_t>(5, 1), 4).status().message(),
            "a window of 5 tokens ending at position 4 for a model of model.seq 8: give "
            "model.seq tokens and a position below it");
  EXPECT_EQ(run.executor->next_token_logits(window_of(settings, 8), 8).status().message(),
            "a window of 8 tokens ending at position 8 for a model of model.seq 8: give "
            "model.seq tokens and a position below it");
  // Still usable.
  EXPECT_TRUE(run.executor->next_token_logits(window_of(settings, 8), 7).ok());

  TrainSettings chunked = settings;
  chunked.model.gpt.head_chunk_rows = 4;
  ForwardOnly chunked_run;
  open_forward_only(chunked, "1f1b", world_size(), 1, chunked_run);
  ASSERT_TRUE(chunked_run.status.ok()) << chunked_run.status.message();
  const Status refused =
      chunked_run.executor->next_token_logits(window_of(settings, 8), 7).status();
  EXPECT_EQ(refused.code(), StatusCode::unsupported);
  EXPECT_EQ(refused.message(),
            "this gpt's head is chunked (model.head_chunk_rows) and keeps no logits: build the "
            "pipeline with head_chunk_rows = 0 to read them");
}

}  // namespace
}  // namespace spw
