// The chunked GPT head (model.head_chunk_rows) computes what the head that keeps its logits
// computes, the loss, LN_f's input gradient and every parameter gradient, while its stash
// holds no [rows, vocab] tensor; and a model with it trains as the unchunked one does.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "op_test_support.hpp"
#include "runtime/gpt_blocks.hpp"
#include "runtime/job_config.hpp"
#include "runtime/parameter_store.hpp"
#include "runtime/train_command.hpp"
#include "runtime/trainer.hpp"

namespace spw {
namespace {

constexpr std::int64_t kSamples = 4, kSeq = 32, kRows = kSamples * kSeq, kD = 32;
constexpr std::int64_t kVocab = 300;  // no multiple of a vector's width

std::vector<float> values(const Tensor& t) { return {t.data(), t.data() + t.numel()}; }

using testing::max_relative;

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

struct Inputs {
  Tensor x;
  std::vector<std::int32_t> targets;
  MicrobatchData mb;
};

Inputs random_inputs() {
  Inputs in;
  in.x = Tensor::zeros({kRows, kD}, MemoryCategory::workspace).value();
  fill_normal(in.x, 1.0, 5, "x");
  std::mt19937 random(6);
  std::uniform_int_distribution<std::int32_t> id(0, kVocab - 1);
  for (std::int64_t i = 0; i < kRows; ++i) in.targets.push_back(id(random));
  in.mb.samples = kSamples;
  in.mb.seq = kSeq;
  in.mb.targets = in.targets.data();
  in.mb.grad_scale = 1.0f / (2 * kRows);  // a microbatch of a batch twice its size
  return in;
}

// What one head computed for one microbatch.
struct HeadPass {
  double loss = 0;
  std::vector<float> dinput;
  std::vector<std::vector<float>> grads;
  std::size_t stash_bytes = 0;
};

// The same parameters whatever the chunking.
std::unique_ptr<Block> initialised_head(std::int64_t chunk_rows) {
  GptShape shape;
  shape.d_model = kD;
  shape.seq = kSeq;
  shape.vocab = kVocab;
  shape.head_chunk_rows = chunk_rows;
  std::unique_ptr<Block> head = make_gpt_head(shape).value();
  EXPECT_TRUE(head->init_parameters(3).ok());
  return head;
}

HeadPass run_head(std::int64_t chunk_rows, Inputs& in) {
  std::unique_ptr<Block> head = initialised_head(chunk_rows);
  Block& block = *head;
  // Gradients of an earlier microbatch, which the head must add to, not overwrite.
  for (const NamedParameter& p : block.parameters()) p.grad->fill(0.25f);
  in.mb.backward_follows = true;
  BlockState state;
  HeadPass pass;
  Tensor dinput = Tensor::zeros({kRows, kD}, MemoryCategory::workspace).value();
  Status status = block.forward(in.mb, &in.x, nullptr, state, &pass.loss);
  EXPECT_TRUE(status.ok()) << status.message();
  pass.stash_bytes = state.saved.bytes();
  status = block.backward_input(in.mb, &in.x, nullptr, &dinput, state);
  EXPECT_TRUE(status.ok()) << status.message();
  status = block.backward_weight(in.mb, &in.x, nullptr, state);
  EXPECT_TRUE(status.ok()) << status.message();
  pass.dinput = values(dinput);
  for (const NamedParameter& p : block.parameters()) pass.grads.push_back(values(*p.grad));
  return pass;
}

TEST(ChunkedHead, ComputesTheUnchunkedHeadsLossAndGradients) {
  Inputs in = random_inputs();
  const HeadPass whole = run_head(0, in);
  // 64 divides the rows into whole loss blocks; 48 leaves a last chunk of 32.
  for (std::int64_t chunk : {std::int64_t{64}, std::int64_t{48}, kRows, std::int64_t{1000}}) {
    SCOPED_TRACE("head_chunk_rows " + std::to_string(chunk));
    const HeadPass chunked = run_head(chunk, in);
    if (chunk % 64 == 0 || chunk >= kRows) {
      EXPECT_TRUE(same_bits(chunked.loss, whole.loss)) << chunked.loss << " vs " << whole.loss;
    }
    EXPECT_NEAR(chunked.loss, whole.loss, 1e-6 * whole.loss);
    EXPECT_LT(max_relative(chunked.dinput, whole.dinput), 1e-5);
    ASSERT_EQ(chunked.grads.size(), whole.grads.size());
    for (std::size_t p = 0; p < whole.grads.size(); ++p) {
      EXPECT_LT(max_relative(chunked.grads[p], whole.grads[p]), 1e-5) << "parameter " << p;
    }
  }
}

TEST(ChunkedHead, ItsStashHoldsNoLogits) {
  Inputs in = random_inputs();
  const auto floats = [](std::int64_t n) { return static_cast<std::size_t>(n) * sizeof(float); };
  // LN_f's output, mean and rstd, then the logits, or LN_f's output gradient.
  EXPECT_EQ(run_head(0, in).stash_bytes, floats(kRows * kD + 2 * kRows + kRows * kVocab));
  EXPECT_EQ(run_head(64, in).stash_bytes, floats(kRows * kD + 2 * kRows + kRows * kD));
}

TEST(ChunkedHead, AnEvaluationKeepsNothingForABackwardAndABackwardAfterItIsAnError) {
  Inputs in = random_inputs();
  std::unique_ptr<Block> head = initialised_head(64);
  in.mb.backward_follows = false;
  BlockState state;
  double loss = 0;
  ASSERT_TRUE(head->forward(in.mb, &in.x, nullptr, state, &loss).ok());
  EXPECT_EQ(state.saved.bytes(), (kRows * kD + 2 * kRows) * sizeof(float));
  EXPECT_EQ(head->logits(state), nullptr);
  EXPECT_TRUE(same_bits(loss, run_head(0, in).loss));
  for (const NamedParameter& p : head->parameters()) {
    EXPECT_EQ(*std::max_element(p.grad->data(), p.grad->data() + p.grad->numel()), 0.0f)
        << p.name << ": an evaluation added to the gradients";
  }
  Tensor dinput = Tensor::zeros({kRows, kD}, MemoryCategory::workspace).value();
  const Status status = head->backward_input(in.mb, &in.x, nullptr, &dinput, state);
  EXPECT_EQ(status.code(), StatusCode::invalid_argument);
  EXPECT_EQ(status.message(),
            "head: a backward after a forward that was not told one follows "
            "(MicrobatchData::backward_follows): with model.head_chunk_rows the head computes "
            "its gradient in the forward");
}

TrainSettings small_gpt(int head_chunk_rows) {
  auto job = parse_job_string(
      "[model]\nkind = \"gpt\"\nlayers = 2\nd_model = 32\nheads = 4\nseq = 16\nvocab = 300\n"
      "head_chunk_rows = " +
          std::to_string(head_chunk_rows) +
          "\n"
          "[data]\nsource = \"synthetic\"\n"
          "[train]\nbatch = 8\nmicrobatches = 2\nsteps = 3\noptimizer = \"sgd\"\nlr = 0.1\n",
      "small.toml", {});
  EXPECT_TRUE(job.ok()) << job.status().message();
  auto settings = train_settings_from(*job);
  EXPECT_TRUE(settings.ok()) << settings.status().message();
  return *settings;
}

// SGD: its update is linear in the gradients, so their rounding stays rounding-sized.
TEST(ChunkedHead, AModelWithItTrainsAsTheUnchunkedOne) {
  std::vector<std::vector<double>> losses;
  std::vector<std::vector<std::vector<float>>> weights;
  for (int chunk : {0, 64}) {
    std::unique_ptr<Trainer> trainer = Trainer::create(small_gpt(chunk)).value();
    losses.emplace_back();
    for (int step = 0; step < 3; ++step) {
      StepResult result;
      const Status status = trainer->run_step(result);
      ASSERT_TRUE(status.ok()) << status.message();
      losses.back().push_back(result.loss);
    }
    weights.emplace_back();
    for (const NamedParameter& p : trainer->model().parameters()) {
      weights.back().push_back(values(*p.value));
    }
  }
  // The first step's loss comes from the same parameters: the same bits.
  EXPECT_TRUE(same_bits(losses[1][0], losses[0][0])) << losses[1][0] << " vs " << losses[0][0];
  for (int step = 1; step < 3; ++step) {
    EXPECT_NEAR(losses[1][step], losses[0][step], 1e-5 * losses[0][step]) << "step " << step;
  }
  // The steps moved the model (random tokens leave nothing to learn, but SGD still steps).
  EXPECT_GT(std::abs(losses[0][2] - losses[0][0]), 1e-4 * losses[0][0]);
  for (std::size_t p = 0; p < weights[0].size(); ++p) {
    EXPECT_LT(max_relative(weights[1][p], weights[0][p]), 1e-5) << "parameter " << p;
  }
}

TEST(ChunkedHead, ATrainerSaysWhyItHasNoLogitsToRead) {
  std::unique_ptr<Trainer> trainer = Trainer::create(small_gpt(64)).value();
  std::vector<std::int32_t> tokens(16, 1), targets(16, 2);
  MicrobatchData mb;
  mb.samples = 1;
  mb.seq = 16;
  mb.tokens = tokens.data();
  mb.targets = targets.data();
  const auto scores = trainer->logits(mb);
  ASSERT_FALSE(scores.ok());
  EXPECT_EQ(scores.status().message(),
            "this gpt's head is chunked (model.head_chunk_rows) and keeps no logits: build the "
            "trainer with head_chunk_rows = 0 to read them");
}

}  // namespace
}  // namespace spw
