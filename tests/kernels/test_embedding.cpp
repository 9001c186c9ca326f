#include <gtest/gtest.h>

#include <omp.h>

#include <cstdint>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "kernels/ops/embedding.hpp"
#include "kernels/reference/embedding.hpp"
#include "op_test_support.hpp"

namespace spw {
namespace {

using testing::float_values;

using testing::close_normwise;
using testing::random_vector;
using testing::tensor_from;
using testing::to_double;
using testing::zeros;

constexpr std::int64_t kVocab = 256;

std::size_t sz(std::int64_t n) { return static_cast<std::size_t>(n); }

// Random values rounded to float, so the double reference sees exactly what the op sees.
std::vector<std::int32_t> random_tokens(std::int64_t n, std::int64_t vocab, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int32_t> dist(0, static_cast<std::int32_t>(vocab - 1));
  std::vector<std::int32_t> tokens(sz(n));
  for (auto& t : tokens) t = dist(rng);
  return tokens;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

TEST(EmbeddingReference, BackwardMatchesFiniteDifferences) {
  const std::int64_t batch = 2, seq = 3, vocab = 5, max_seq = 4, d = 3;
  const std::vector<std::int32_t> tokens = {4, 1, 4, 0, 4, 1};  // repeats exercise the sums
  std::vector<double> tok = random_vector(sz(vocab * d), 1);
  std::vector<double> pos = random_vector(sz(max_seq * d), 2);
  const std::vector<double> r = random_vector(sz(batch * seq * d), 3);
  std::vector<double> y(sz(batch * seq * d));
  auto loss = [&] {
    ref::embedding_forward(tokens.data(), batch, seq, tok.data(), pos.data(), d, y.data());
    return testing::dot(y, r);
  };
  const std::vector<double> numeric_tok = testing::finite_difference(tok, loss);
  const std::vector<double> numeric_pos = testing::finite_difference(pos, loss);
  std::vector<double> dtok(tok.size(), 0.0), dpos(pos.size(), 0.0);
  ref::embedding_backward_weight(tokens.data(), batch, seq, r.data(), d, dtok.data(),
                                 dpos.data());
  EXPECT_TRUE(close_normwise(dtok, numeric_tok, 1e-6));
  EXPECT_TRUE(close_normwise(dpos, numeric_pos, 1e-6));
}

struct Case {
  std::int64_t batch, seq, d;
  bool one_token;  // every id the same: the worst case for scatter-add collisions
  std::int64_t rows() const { return batch * seq; }
};

std::string case_name(const Case& c) {
  return "batch " + std::to_string(c.batch) + ", seq " + std::to_string(c.seq) + ", d " +
         std::to_string(c.d) + (c.one_token ? ", one token" : "");
}

void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }

struct Inputs {
  std::int64_t max_seq;
  std::vector<std::int32_t> tokens;
  std::vector<double> tok, pos, dy, dtok0, dpos0;
};

Inputs make_inputs(const Case& c) {
  const std::int64_t max_seq = c.seq + 3;
  Inputs in{max_seq,
            random_tokens(c.rows(), kVocab, 10),
            float_values(kVocab * c.d, 11),
            float_values(max_seq * c.d, 12),
            float_values(c.rows() * c.d, 13),
            float_values(kVocab * c.d, 14),
            float_values(max_seq * c.d, 15)};
  if (c.one_token) in.tokens.assign(in.tokens.size(), 32);
  return in;
}

class EmbeddingMatchesReference : public ::testing::TestWithParam<Case> {};

TEST_P(EmbeddingMatchesReference, ForwardAndBackward) {
  const Case c = GetParam();
  SCOPED_TRACE(case_name(c));
  const Inputs in = make_inputs(c);

  std::vector<double> y(sz(c.rows() * c.d));
  ref::embedding_forward(in.tokens.data(), c.batch, c.seq, in.tok.data(), in.pos.data(), c.d,
                         y.data());
  // Accumulating onto nonzero gradients checks that the op adds instead of overwriting.
  std::vector<double> dtok = in.dtok0, dpos = in.dpos0;
  ref::embedding_backward_weight(in.tokens.data(), c.batch, c.seq, in.dy.data(), c.d,
                                 dtok.data(), dpos.data());

  const Tensor tok = tensor_from({kVocab, c.d}, in.tok);
  const Tensor pos = tensor_from({in.max_seq, c.d}, in.pos);
  const Tensor dy = tensor_from({c.rows(), c.d}, in.dy);
  Tensor y_t = zeros({c.rows(), c.d});
  Tensor dtok_t = tensor_from({kVocab, c.d}, in.dtok0);
  Tensor dpos_t = tensor_from({in.max_seq, c.d}, in.dpos0);
  ASSERT_TRUE(ops::embedding_forward(in.tokens, c.batch, c.seq, tok, pos, y_t).ok());
  ASSERT_TRUE(
      ops::embedding_backward_weight(in.tokens, c.batch, c.seq, dy, dtok_t, dpos_t).ok());

  EXPECT_TRUE(close_normwise(to_double(y_t), y, 1e-5)) << "y";
  EXPECT_TRUE(close_normwise(to_double(dtok_t), dtok, 1e-5)) << "dtoken_table";
  EXPECT_TRUE(close_normwise(to_double(dpos_t), dpos, 1e-5)) << "dposition_table";
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  // batch*seq = 1, 7, 33, 130.
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {{1, 1}, {1, 7}, {3, 11},
                                                                      {2, 65}};
  for (const auto& [batch, seq] : shapes) {
    for (std::int64_t d : {1, 5, 17, 67, 256}) cases.push_back({batch, seq, d, false});
  }
  cases.push_back({4, 64, 256, true});
  cases.push_back({2, 65, 67, true});
  // At 2 threads, enough rows for copies of the token table (32 (threads - 1) vocab <= rows).
  cases.push_back({32, 256, 17, false});
  cases.push_back({41, 200, 67, true});
  cases.push_back({1024, 1, 5, false});  // seq 1: a single thread owns every position
  // Widths of whole cache lines take the forward's loop that prefetches the next row (256
  // above, 16, 512 and 4096 here; every row's successor, within a block of positions, across
  // sequences, blocks and threads); 300 not. Blocks hold 8 KiB of position rows: 128 at d 16
  // (one partial block), 8 at d 256 (seq 65: four whole blocks and a partial one a thread),
  // 4 at d 512, and one position at d 4096, wider than a block.
  cases.push_back({3, 11, 300, false});
  cases.push_back({3, 11, 16, false});
  cases.push_back({2, 7, 512, true});
  cases.push_back({3, 5, 4096, false});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Sizes, EmbeddingMatchesReference, ::testing::ValuesIn(all_cases()));

TEST(Embedding, AcceptsBatchSeqLayout) {
  const Case c{3, 5, 17, false};
  const Inputs in = make_inputs(c);
  const Tensor tok = tensor_from({kVocab, c.d}, in.tok);
  const Tensor pos = tensor_from({in.max_seq, c.d}, in.pos);
  Tensor y2 = zeros({c.rows(), c.d}), y3 = zeros({c.batch, c.seq, c.d});
  ASSERT_TRUE(ops::embedding_forward(in.tokens, c.batch, c.seq, tok, pos, y2).ok());
  const Status s = ops::embedding_forward(in.tokens, c.batch, c.seq, tok, pos, y3);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(bitwise_equal(y2, y3));

  const Tensor dy3 = tensor_from({c.batch, c.seq, c.d}, in.dy);
  Tensor dtok = zeros({kVocab, c.d}), dpos = zeros({in.max_seq, c.d});
  const Status b = ops::embedding_backward_weight(in.tokens, c.batch, c.seq, dy3, dtok, dpos);
  EXPECT_TRUE(b.ok()) << b.message();
}

void expect_error(const Status& s, StatusCode code, const std::string& message) {
  EXPECT_EQ(s.code(), code) << s.message();
  EXPECT_EQ(s.message(), message);
}

TEST(Embedding, RejectsBadShapesAndIds) {
  const std::int64_t batch = 2, seq = 4, d = 8;
  std::vector<std::int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  const Tensor tok = zeros({kVocab, d}), pos = zeros({seq, d});
  Tensor y = zeros({batch * seq, d});
  y.fill(7.0f);

  tokens[5] = 256;
  expect_error(ops::embedding_forward(tokens, batch, seq, tok, pos, y),
               StatusCode::invalid_argument,
               "embedding_forward: token id 256 at index 5 is out of range [0, 256) of "
               "token_table [256, 8]");
  tokens[5] = -1;
  expect_error(ops::embedding_forward(tokens, batch, seq, tok, pos, y),
               StatusCode::invalid_argument,
               "embedding_forward: token id -1 at index 5 is out of range [0, 256) of "
               "token_table [256, 8]");
  for (std::int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(y.data()[i], 7.0f) << "y was written";
  tokens[5] = 6;

  const std::vector<std::int32_t> long_tokens(10, 1);
  Tensor y_long = zeros({10, d});
  expect_error(ops::embedding_forward(long_tokens, 2, 5, tok, pos, y_long),
               StatusCode::invalid_argument,
               "embedding_forward: seq 5 exceeds max_seq 4 of position_table [4, 8]");
  expect_error(ops::embedding_forward(tokens, 3, seq, tok, pos, y), StatusCode::shape_mismatch,
               "embedding_forward: tokens [8] does not fit batch 3, seq 4: expected [12]");
  expect_error(ops::embedding_forward(tokens, 0, seq, tok, pos, y),
               StatusCode::invalid_argument,
               "embedding_forward: batch 0, seq 4 must both be positive");
  const Tensor pos_narrow = zeros({seq, d - 1});
  expect_error(ops::embedding_forward(tokens, batch, seq, tok, pos_narrow, y),
               StatusCode::shape_mismatch,
               "embedding_forward: position_table [4, 7] is not a table [n, 8]");
  const Tensor tok_flat = zeros({kVocab * d});
  expect_error(ops::embedding_forward(tokens, batch, seq, tok_flat, pos, y),
               StatusCode::shape_mismatch,
               "embedding_forward: token_table [2048] is not a table [n, d] with d >= 1");
  const Tensor tok_null = Tensor::borrow(nullptr, {kVocab, d});
  expect_error(ops::embedding_forward(tokens, batch, seq, tok_null, pos, y),
               StatusCode::invalid_argument,
               "embedding_forward: token_table [256, 8] has no data");
  Tensor y_bad = zeros({batch, seq + 1, d});
  expect_error(ops::embedding_forward(tokens, batch, seq, tok, pos, y_bad),
               StatusCode::shape_mismatch,
               "embedding_forward: y [2, 5, 8] does not fit batch 2, seq 4, d 8: expected "
               "[8, 8] or [2, 4, 8]");

  const Tensor dy = zeros({batch * seq, d});
  Tensor dtok = zeros({kVocab, d}), dpos = zeros({seq, d});
  Tensor dtok_small = zeros({6, d});
  expect_error(ops::embedding_backward_weight(tokens, batch, seq, dy, dtok_small, dpos),
               StatusCode::invalid_argument,
               "embedding_backward_weight: token id 6 at index 5 is out of range [0, 6) of "
               "dtoken_table [6, 8]");
  Tensor dpos_short = zeros({seq - 1, d});
  expect_error(ops::embedding_backward_weight(tokens, batch, seq, dy, dtok, dpos_short),
               StatusCode::invalid_argument,
               "embedding_backward_weight: seq 4 exceeds max_seq 3 of dposition_table [3, 8]");
  const Tensor dy_bad = zeros({batch * seq, d + 1});
  expect_error(ops::embedding_backward_weight(tokens, batch, seq, dy_bad, dtok, dpos),
               StatusCode::shape_mismatch,
               "embedding_backward_weight: dy [8, 9] does not fit batch 2, seq 4, d 8: "
               "expected [8, 8] or [2, 4, 8]");
}

struct Grads {
  Tensor dtok, dpos;
};

Grads backward(const Case& c, int accumulations) {
  const Inputs in = make_inputs(c);
  const Tensor dy = tensor_from({c.rows(), c.d}, in.dy);
  Grads g{zeros({kVocab, c.d}), zeros({in.max_seq, c.d})};
  for (int k = 0; k < accumulations; ++k) {
    EXPECT_TRUE(
        ops::embedding_backward_weight(in.tokens, c.batch, c.seq, dy, g.dtok, g.dpos).ok());
  }
  return g;
}

TEST(Embedding, WeightGradientsAccumulate) {
  // The second call adds its sums onto the first's, so two calls are 2× one call only up to
  // rounding: compare with the double reference run twice as well.
  const Case c{2, 65, 67, false};
  const Inputs in = make_inputs(c);
  std::vector<double> dtok(sz(kVocab * c.d), 0.0), dpos(sz(in.max_seq * c.d), 0.0);
  for (int k = 0; k < 2; ++k) {
    ref::embedding_backward_weight(in.tokens.data(), c.batch, c.seq, in.dy.data(), c.d,
                                   dtok.data(), dpos.data());
  }
  const Grads once = backward(c, 1);
  const Grads twice = backward(c, 2);
  EXPECT_TRUE(close_normwise(to_double(twice.dtok), dtok, 1e-6));
  EXPECT_TRUE(close_normwise(to_double(twice.dpos), dpos, 1e-6));
  std::vector<double> doubled = to_double(once.dtok);
  for (double& v : doubled) v *= 2;
  EXPECT_TRUE(close_normwise(to_double(twice.dtok), doubled, 1e-6));
}

TEST(Embedding, BitIdenticalAcrossRuns) {
  // At 2 threads, 8192 rows: threads other than the first scatter into copies of the table
  // (32 (threads - 1) vocab <= rows); 130 rows: threads own token ids instead.
  for (const Case& c : {Case{32, 256, 40, false}, Case{2, 65, 67, false}}) {
    SCOPED_TRACE(case_name(c));
    const Grads a = backward(c, 2);
    const Grads b = backward(c, 2);
    EXPECT_TRUE(bitwise_equal(a.dtok, b.dtok));
    EXPECT_TRUE(bitwise_equal(a.dpos, b.dpos));

    // Another thread count regroups the token sums (when copies are used) but not the
    // position sums.
    const int saved = omp_get_max_threads();
    omp_set_num_threads(saved == 1 ? 2 : 1);
    const Grads other = backward(c, 2);
    omp_set_num_threads(saved);
    EXPECT_TRUE(close_normwise(to_double(other.dtok), to_double(a.dtok), 1e-6));
    EXPECT_TRUE(bitwise_equal(a.dpos, other.dpos));
  }
}

}  // namespace
}  // namespace spw
