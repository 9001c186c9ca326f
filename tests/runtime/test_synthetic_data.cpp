// Benchmarks compare runs across machines and partitionings, which only means something if the
// synthetic batches are the same however a batch is split and whichever rank makes them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "kernels/memory_ledger.hpp"
#include "runtime/batch_source.hpp"
#include "runtime/job_config.hpp"
#include "runtime/model.hpp"
#include "runtime/synthetic_data.hpp"

namespace spw {
namespace {

using Slices = std::vector<std::pair<std::int64_t, std::int64_t>>;

struct TokenBatch {
  std::vector<std::int32_t> tokens, targets;
  bool operator==(const TokenBatch&) const = default;
};

TokenBatch tokens_for(const SyntheticTokens& data, std::int64_t step, std::int64_t batch,
                      std::int64_t seq, const Slices& slices) {
  TokenBatch out{std::vector<std::int32_t>(static_cast<std::size_t>(batch * seq), -1),
                 std::vector<std::int32_t>(static_cast<std::size_t>(batch * seq), -1)};
  for (auto [first, count] : slices) {
    data.fill_batch(step, first, count, batch, seq, out.tokens.data() + first * seq,
                    out.targets.data() + first * seq);
  }
  return out;
}

TEST(SyntheticTokens, SameSeedStepAndSampleGiveTheSameTokens) {
  const SyntheticTokens data(1234, 256);
  const Slices whole = {{0, 8}};
  EXPECT_EQ(tokens_for(data, 3, 8, 32, whole),
            tokens_for(SyntheticTokens(1234, 256), 3, 8, 32, whole));
  EXPECT_NE(tokens_for(data, 3, 8, 32, whole), tokens_for(data, 4, 8, 32, whole));
  EXPECT_NE(tokens_for(data, 3, 8, 32, whole),
            tokens_for(SyntheticTokens(1235, 256), 3, 8, 32, whole));
}

TEST(SyntheticTokens, SlicesOfABatchEqualTheWholeBatch) {
  const SyntheticTokens data(42, 256);
  EXPECT_EQ(tokens_for(data, 11, 12, 16, {{0, 12}}),
            tokens_for(data, 11, 12, 16, {{0, 5}, {5, 1}, {6, 6}}));
  // A sample does not depend on the batch it sits in: sample 5 alone equals row 5.
  std::vector<std::int32_t> tokens(16), targets(16);
  data.fill_batch(11, 5, 1, 1000, 16, tokens.data(), targets.data());
  const TokenBatch whole = tokens_for(data, 11, 12, 16, {{0, 12}});
  EXPECT_TRUE(std::equal(tokens.begin(), tokens.end(), whole.tokens.begin() + 5 * 16));
}

TEST(SyntheticTokens, TargetsAreTheInputsShiftedByOne) {
  const TokenBatch batch = tokens_for(SyntheticTokens(7, 256), 0, 4, 64, {{0, 4}});
  for (std::size_t row = 0; row < 4; ++row) {
    for (std::size_t t = 0; t + 1 < 64; ++t) {
      ASSERT_EQ(batch.targets[row * 64 + t], batch.tokens[row * 64 + t + 1]);
    }
  }
}

TEST(SyntheticTokens, TokensCoverTheByteVocabularyUniformly) {
  const TokenBatch batch = tokens_for(SyntheticTokens(99, 256), 5, 64, 128, {{0, 64}});
  std::vector<int> histogram(256, 0);
  for (std::int32_t token : batch.tokens) {
    ASSERT_GE(token, 0);
    ASSERT_LT(token, 256);
    ++histogram[static_cast<std::size_t>(token)];
  }
  // 8192 draws, 32 expected per value: every value occurs, none wildly often.
  for (int count : histogram) {
    EXPECT_GT(count, 8);
    EXPECT_LT(count, 70);
  }
}

// Pins the generator (values from an independent splitmix64 in Python): changing it silently
// changes every benchmark's input.
TEST(SyntheticTokens, GeneratorIsPinned) {
  const TokenBatch batch = tokens_for(SyntheticTokens(1234, 256), 0, 1, 8, {{0, 1}});
  EXPECT_EQ(batch.tokens, (std::vector<std::int32_t>{76, 156, 16, 0, 251, 216, 75, 208}));
  // Another vocabulary scales the same 32 bits (multiply-shift), so 256 keeps the top byte.
  const TokenBatch gpt2 = tokens_for(SyntheticTokens(1234, 50257), 0, 1, 8, {{0, 1}});
  EXPECT_EQ(gpt2.tokens,
            (std::vector<std::int32_t>{15057, 30795, 3226, 173, 49409, 42551, 14769, 40838}));
}

TEST(SyntheticTokens, TokensStayInsideALargerVocabularyAndReachItsTop) {
  constexpr std::int32_t kVocab = 1000;
  const TokenBatch batch = tokens_for(SyntheticTokens(5, kVocab), 2, 64, 128, {{0, 64}});
  std::vector<int> histogram(kVocab, 0);
  for (std::int32_t token : batch.tokens) {
    ASSERT_GE(token, 0);
    ASSERT_LT(token, kVocab);
    ++histogram[static_cast<std::size_t>(token)];
  }
  // 8192 draws over 1000 values, 8.2 expected each: both ends are drawn, no value piles up.
  EXPECT_GT(histogram.front() + histogram.back(), 0);
  EXPECT_GT(*std::max_element(histogram.begin() + 900, histogram.end()), 0);
  EXPECT_LT(*std::max_element(histogram.begin(), histogram.end()), 30);
}

TEST(SyntheticFeatures, RejectsEmptyShapes) {
  EXPECT_EQ(SyntheticFeatures::create(1, 0, 10).status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(SyntheticFeatures::create(1, 784, 0).status().code(), StatusCode::invalid_argument);
}

TEST(SyntheticFeatures, SameSeedStepAndSampleGiveTheSameDataInAnySlicing) {
  // An odd feature count exercises the unpaired last Box-Muller draw.
  Result<SyntheticFeatures> data = SyntheticFeatures::create(1234, 31, 10);
  ASSERT_TRUE(data.ok()) << data.status().message();
  constexpr std::int64_t kBatch = 10, kStep = 17;
  std::vector<float> whole_x(kBatch * 31), x(kBatch * 31, -99.0f);
  std::vector<std::int32_t> whole_labels(kBatch), labels(kBatch, -1);
  data->fill_batch(kStep, 0, kBatch, kBatch, whole_x.data(), whole_labels.data());
  for (auto [first, count] : Slices{{0, 3}, {3, 3}, {6, 4}}) {
    data->fill_batch(kStep, first, count, kBatch, x.data() + first * 31, labels.data() + first);
  }
  EXPECT_EQ(x, whole_x);
  EXPECT_EQ(labels, whole_labels);

  Result<SyntheticFeatures> same = SyntheticFeatures::create(1234, 31, 10);
  ASSERT_TRUE(same.ok());
  same->fill_batch(kStep, 0, kBatch, kBatch, x.data(), labels.data());
  EXPECT_EQ(x, whole_x);
  same->fill_batch(kStep + 1, 0, kBatch, kBatch, x.data(), labels.data());
  EXPECT_NE(x, whole_x);
}

TEST(SyntheticFeatures, FeaturesAreStandardNormalAndLabelsCoverTheClasses) {
  Result<SyntheticFeatures> data = SyntheticFeatures::create(5, 784, 10);
  ASSERT_TRUE(data.ok()) << data.status().message();
  constexpr std::int64_t kBatch = 256;
  std::vector<float> x(kBatch * 784);
  std::vector<std::int32_t> labels(kBatch);
  data->fill_batch(0, 0, kBatch, kBatch, x.data(), labels.data());
  double sum = 0.0, sum_squares = 0.0;
  for (float v : x) {
    ASSERT_TRUE(std::isfinite(v));
    sum += v;
    sum_squares += static_cast<double>(v) * v;
  }
  const double n = static_cast<double>(x.size());
  const double mean = sum / n;
  // 200,704 draws: the standard error of the mean is about 0.0022, of the variance 0.0032.
  EXPECT_NEAR(mean, 0.0, 0.015);
  EXPECT_NEAR(sum_squares / n - mean * mean, 1.0, 0.02);
  std::set<std::int32_t> seen;
  for (std::int32_t label : labels) {
    ASSERT_GE(label, 0);
    ASSERT_LT(label, 10);
    seen.insert(label);
  }
  EXPECT_EQ(seen.size(), 10u);
}

// A microbatch's inputs are sized against what the node's memory budget has left before
// they are allocated: one too large is a message naming the samples, the bytes and the fix,
// not std::bad_alloc or the OOM killer.
TEST(MicrobatchBuffers, AMicrobatchPastTheNodesBudgetIsRefusedNamingTheFix) {
  ModelSpec spec;
  spec.gpt.layers = 1;
  spec.gpt.d_model = 8;
  spec.gpt.heads = 1;
  spec.gpt.seq = 16;
  DataConfig data;
  data.source = DataKind::synthetic;
  auto source = open_batch_source(data, spec, 7);
  ASSERT_TRUE(source.ok()) << source.status().message();
  MemoryLedger& ledger = MemoryLedger::process();
  alignas(8) std::uint64_t shared = 0;
  const std::size_t budget = ledger.current_total() + 4096;
  ASSERT_TRUE(ledger.set_node_budget(NodeMemoryBudget{budget, "a test's figure", 1, &shared}).ok());
  MicrobatchBuffers buffers;
  // 32 samples of 16 positions: 512 tokens and 512 targets, 4096 bytes: exactly what is left.
  EXPECT_TRUE((*source)->fill(0, 0, 32, 64, buffers).ok());
  EXPECT_EQ(buffers.tokens.size(), 512u);
  const Status status = (*source)->fill(0, 0, 33, 66, buffers);
  ASSERT_TRUE(ledger.set_node_budget(std::nullopt).ok());
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::out_of_memory);
  EXPECT_EQ(status.message(),
            "a microbatch of 33 samples needs 4.12 KiB for its inputs and targets, more than "
            "the 4.00 KiB this node's memory budget has left (" +
                format_bytes(budget) +
                ", a test's figure): raise train.microbatches or lower "
                "train.batch");
}

}  // namespace
}  // namespace spw
