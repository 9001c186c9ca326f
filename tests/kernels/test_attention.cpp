#include <gtest/gtest.h>

#include <omp.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/memory_ledger.hpp"
#include "kernels/numa_allocator.hpp"
#include "kernels/ops/attention.hpp"
#include "kernels/ops/attention_tiled.hpp"
#include "kernels/reference/attention.hpp"
#include "op_test_support.hpp"

namespace spw {
namespace {

using testing::bit_identical;
using testing::close_normwise;
using testing::filled;
using testing::random_vector;
using testing::tensor_from;
using testing::to_double;
using testing::zeros;

struct Case {
  std::int64_t batch, seq, heads, head_dim;
  double amplitude = 2.0;  // qkv values in [-amplitude, amplitude)
  std::int64_t d() const { return heads * head_dim; }
  std::int64_t rows() const { return batch * seq; }
  std::string name() const {
    return "batch " + std::to_string(batch) + ", seq " + std::to_string(seq) + ", heads " +
           std::to_string(heads) + ", head_dim " + std::to_string(head_dim);
  }
};

// Forward and backward of the optimized op on one set of inputs.
struct OpResult {
  Tensor y, lse, dqkv;
};

OpResult run_op(const Case& c, const Tensor& qkv, const Tensor& dy) {
  OpResult r{zeros({c.rows(), c.d()}), zeros({c.batch, c.heads, c.seq}),
             zeros({c.rows(), 3 * c.d()})};
  const Status fwd = ops::attention_forward(qkv, c.batch, c.seq, c.heads, r.y, r.lse);
  EXPECT_TRUE(fwd.ok()) << fwd.message();
  const Status bwd =
      ops::attention_backward(dy, qkv, r.y, r.lse, c.batch, c.seq, c.heads, r.dqkv);
  EXPECT_TRUE(bwd.ok()) << bwd.message();
  return r;
}

TEST(AttentionReference, BackwardMatchesFiniteDifferences) {
  const Case c{2, 5, 2, 3};
  std::vector<double> qkv = random_vector(static_cast<std::size_t>(c.rows() * 3 * c.d()), 1);
  const std::vector<double> r = random_vector(static_cast<std::size_t>(c.rows() * c.d()), 2);
  auto loss = [&] {
    return testing::dot(ref::attention_forward(qkv, c.batch, c.seq, c.heads).y, r);
  };
  const std::vector<double> numeric = testing::finite_difference(qkv, loss);
  const std::vector<double> analytic = ref::attention_backward(r, qkv, c.batch, c.seq, c.heads);
  EXPECT_TRUE(close_normwise(analytic, numeric, 1e-6));
}

TEST(AttentionReference, LseIsTheLogOfTheSoftmaxDenominator) {
  // One position attends only to itself: y = v and lse = q·k / sqrt(hd).
  const std::vector<double> qkv = {1, 2, 3, 4, 5, 6};  // d = 2, one head
  const auto out = ref::attention_forward(qkv, 1, 1, 1);
  EXPECT_DOUBLE_EQ(out.y[0], 5);
  EXPECT_DOUBLE_EQ(out.y[1], 6);
  EXPECT_NEAR(out.lse[0], (1 * 3 + 2 * 4) / std::sqrt(2.0), 1e-12);
}

class AttentionMatchesReference : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionMatchesReference, ForwardAndBackward) {
  const Case c = GetParam();
  SCOPED_TRACE(c.name());
  // Round the inputs to float first, so the double reference sees exactly what the op sees.
  const auto qkv_values = testing::cast_vector<double>(testing::cast_vector<float>(
      random_vector(static_cast<std::size_t>(c.rows() * 3 * c.d()), 11, -c.amplitude,
                    c.amplitude)));
  const auto dy_values = testing::cast_vector<double>(testing::cast_vector<float>(
      random_vector(static_cast<std::size_t>(c.rows() * c.d()), 12)));
  const Tensor qkv = tensor_from({c.rows(), 3 * c.d()}, qkv_values);
  const Tensor dy = tensor_from({c.rows(), c.d()}, dy_values);

  const OpResult got = run_op(c, qkv, dy);
  const auto want = ref::attention_forward(qkv_values, c.batch, c.seq, c.heads);
  const auto want_dqkv = ref::attention_backward(dy_values, qkv_values, c.batch, c.seq, c.heads);

  EXPECT_TRUE(close_normwise(to_double(got.y), want.y, 1e-5)) << "y";
  EXPECT_TRUE(close_normwise(to_double(got.lse), want.lse, 1e-5)) << "lse";
  EXPECT_TRUE(close_normwise(to_double(got.dqkv), want_dqkv, 1e-5)) << "dqkv";
}

std::vector<Case> odd_cases() {
  std::vector<Case> cases;
  for (std::int64_t seq : {1, 7, 33, 130}) {
    for (std::int64_t heads : {1, 3, 4}) {
      for (std::int64_t head_dim : {1, 5, 16, 64}) {
        // Batch alternates so both 1 and 3 meet every sequence length.
        const std::int64_t batch = (heads + head_dim) % 2 == 0 ? 1 : 3;
        cases.push_back({batch, seq, heads, head_dim});
      }
    }
  }
  return cases;
}

// Head widths that are whole vectors take the register-tiled path (attention_tiled.cpp) on
// AVX-512 builds; the odd sizes above also give it sequence tails (hd 16 and 64).
std::vector<Case> gpt_cases() {
  return {{2, 128, 4, 32}, {1, 64, 2, 48}, {1, 256, 2, 64}, {3, 24, 2, 32}};
}

// Edges of the AVX2 tiles (attention_tiled_avx2.cpp) that AVX-512 builds do not have: head
// widths of 1 to 12 vectors of 8 split into tiles of 3, 2 and 1 vectors (hd 8: 1, 24: 3,
// 40: 3 + 2, 56: 3 + 2 + 2, 96: 3 + 3 + 3 + 3), and sequences around the 4-row tiles, the
// 8-lane vectors and the 16-row blocks (1-5, 9, 12, 17, 20, 23, 31, 47, 65, 100).
std::vector<Case> avx2_tile_cases() {
  return {{1, 1, 1, 8},   {2, 3, 2, 24},   {1, 4, 1, 40},  {3, 9, 2, 8},
          {1, 12, 3, 56}, {2, 17, 1, 24},  {1, 20, 2, 40}, {2, 31, 2, 32},
          {1, 65, 2, 56}, {1, 100, 1, 24}, {2, 47, 2, 64}, {1, 23, 1, 96},
          {2, 2, 1, 16},  {1, 5, 2, 32}};
}

// Scores far apart: most probabilities underflow to 0 (exp2 of arguments below -126), each
// row's softmax is nearly one-hot, and lse is dominated by its max.
std::vector<Case> peaked_cases() {
  return {{2, 37, 2, 24, 6.0}, {1, 64, 2, 32, 6.0}, {1, 130, 1, 64, 4.0}};
}

std::string case_name(const ::testing::TestParamInfo<Case>& param_info) {
  const Case& c = param_info.param;
  // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "b" + std::to_string(...).
  std::string name = "b";
  name += std::to_string(c.batch);
  name += "_t";
  name += std::to_string(c.seq);
  name += "_h";
  name += std::to_string(c.heads);
  name += "_hd";
  name += std::to_string(c.head_dim);
  return name;
}

INSTANTIATE_TEST_SUITE_P(GptShapes, AttentionMatchesReference, ::testing::ValuesIn(gpt_cases()),
                         case_name);

INSTANTIATE_TEST_SUITE_P(OddSizes, AttentionMatchesReference, ::testing::ValuesIn(odd_cases()),
                         case_name);

INSTANTIATE_TEST_SUITE_P(Avx2TileEdges, AttentionMatchesReference,
                         ::testing::ValuesIn(avx2_tile_cases()), case_name);

INSTANTIATE_TEST_SUITE_P(PeakedSoftmax, AttentionMatchesReference,
                         ::testing::ValuesIn(peaked_cases()), case_name);

// The cases above test the register tiles only where the build has them: this says which.
TEST(Attention, TiledKernelsServeWholeVectorHeadWidths) {
  using ops::attention_detail::tiled_attention_fits;
#if defined(__AVX512F__)
  for (std::int64_t hd : {16, 32, 48, 64, 128}) EXPECT_TRUE(tiled_attention_fits(hd)) << hd;
  for (std::int64_t hd : {1, 5, 8, 24, 40}) EXPECT_FALSE(tiled_attention_fits(hd)) << hd;
#elif defined(__AVX2__) && defined(__FMA__)
  for (std::int64_t hd : {8, 16, 24, 32, 40, 56, 64, 96, 128}) {
    EXPECT_TRUE(tiled_attention_fits(hd)) << hd;
  }
  for (std::int64_t hd : {1, 4, 5, 12, 33}) EXPECT_FALSE(tiled_attention_fits(hd)) << hd;
#else
  EXPECT_FALSE(tiled_attention_fits(32));
#endif
}

TEST(Attention, LaterPositionsDoNotChangeEarlierOutputs) {
  // seq 100 spans several row blocks of the op, so positions inside t's own (diagonal) block
  // and in later blocks are both perturbed. Head width 5 runs on BLIS everywhere, 16 on
  // register tiles with AVX-512 or AVX2, 24 on AVX2's (BLIS with AVX-512).
  for (const Case c : {Case{2, 100, 3, 5}, Case{2, 100, 3, 16}, Case{2, 100, 2, 24}}) {
    SCOPED_TRACE(c.name());
    const std::int64_t t = 40;
    auto values = random_vector(static_cast<std::size_t>(c.rows() * 3 * c.d()), 21);
    const Tensor qkv = tensor_from({c.rows(), 3 * c.d()}, values);
    for (std::int64_t b = 0; b < c.batch; ++b) {
      for (std::int64_t pos = t + 1; pos < c.seq; ++pos) {
        for (std::int64_t col = 0; col < 3 * c.d(); ++col) {
          values[static_cast<std::size_t>((b * c.seq + pos) * 3 * c.d() + col)] += 3.0;
        }
      }
    }
    const Tensor changed = tensor_from({c.rows(), 3 * c.d()}, values);

    Tensor y1 = zeros({c.rows(), c.d()}), y2 = zeros({c.rows(), c.d()});
    Tensor lse1 = zeros({c.batch, c.heads, c.seq}), lse2 = zeros({c.batch, c.heads, c.seq});
    ASSERT_TRUE(ops::attention_forward(qkv, c.batch, c.seq, c.heads, y1, lse1).ok());
    ASSERT_TRUE(ops::attention_forward(changed, c.batch, c.seq, c.heads, y2, lse2).ok());
    bool later_changed = false;
    for (std::int64_t b = 0; b < c.batch; ++b) {
      for (std::int64_t pos = 0; pos < c.seq; ++pos) {
        for (std::int64_t col = 0; col < c.d(); ++col) {
          const auto i = static_cast<std::size_t>((b * c.seq + pos) * c.d() + col);
          if (pos <= t) {
            ASSERT_EQ(y1.data()[i], y2.data()[i]) << "batch " << b << ", position " << pos;
          } else {
            later_changed = later_changed || y1.data()[i] != y2.data()[i];
          }
        }
        for (std::int64_t h = 0; h < c.heads; ++h) {
          const auto i = static_cast<std::size_t>((b * c.heads + h) * c.seq + pos);
          if (pos <= t) {
            ASSERT_EQ(lse1.data()[i], lse2.data()[i]) << "lse at position " << pos;
          }
        }
      }
    }
    EXPECT_TRUE(later_changed) << "the perturbation should reach later positions";
  }
}

// Every (batch, head) pair is computed whole by one thread, so the bits must not depend on
// how many threads share the pairs (the MPI tests rerun steps and compare bits). Cases for
// BLIS (hd 5), tiles of both ISAs (16, 64) and AVX2's only (24), pairs that do not divide
// evenly among the threads, and odd sequences.
TEST(Attention, RunsAreBitIdenticalForAnyThreadCount) {
  const int saved = omp_get_max_threads();
  for (const Case c : {Case{3, 70, 4, 16}, Case{3, 37, 5, 24}, Case{2, 129, 3, 64},
                       Case{3, 33, 3, 5}}) {
    SCOPED_TRACE(c.name());
    const Tensor qkv = tensor_from(
        {c.rows(), 3 * c.d()}, random_vector(static_cast<std::size_t>(c.rows() * 3 * c.d()), 31));
    const Tensor dy = tensor_from({c.rows(), c.d()},
                                  random_vector(static_cast<std::size_t>(c.rows() * c.d()), 32));
    omp_set_num_threads(1);
    const OpResult single = run_op(c, qkv, dy);
    for (int threads : {1, 2, 3}) {
      SCOPED_TRACE(std::to_string(threads) + " threads");
      omp_set_num_threads(threads);
      const OpResult again = run_op(c, qkv, dy);
      EXPECT_TRUE(bit_identical(single.y, again.y));
      EXPECT_TRUE(bit_identical(single.lse, again.lse));
      EXPECT_TRUE(bit_identical(single.dqkv, again.dqkv));
    }
  }
  omp_set_num_threads(saved);
}

// The scratch outlives the call: a call after a larger one, with other inputs, must not read
// what that one left there, and a repeated call must not map any more memory.
TEST(Attention, KeptScratchGivesTheResultsOfAFreshCall) {
  const Case small{2, 37, 3, 16}, large{2, 129, 3, 64};
  auto inputs = [](const Case& c, unsigned seed) {
    return std::pair{
        tensor_from({c.rows(), 3 * c.d()},
                    random_vector(static_cast<std::size_t>(c.rows() * 3 * c.d()), seed)),
        tensor_from({c.rows(), c.d()},
                    random_vector(static_cast<std::size_t>(c.rows() * c.d()), seed + 1))};
  };
  const auto [qkv, dy] = inputs(small, 41);
  const auto [large_qkv, large_dy] = inputs(large, 43);

  OpResult fresh{}, after_large{}, repeated{};
  std::int64_t ledger_before_repeat = 0, ledger_after_repeat = 0;
  std::size_t kept_before_repeat = 0, kept_after_repeat = 0;
  // Each std::thread starts with no kept scratch.
  std::thread([&] { fresh = run_op(small, qkv, dy); }).join();
  std::thread([&] {
    (void)run_op(large, large_qkv, large_dy);
    after_large = run_op(small, qkv, dy);
    ledger_before_repeat = static_cast<std::int64_t>(MemoryLedger::process().current_total());
    kept_before_repeat = scratch_buffer_bytes();
    repeated = run_op(small, qkv, dy);
    ledger_after_repeat = static_cast<std::int64_t>(MemoryLedger::process().current_total());
    kept_after_repeat = scratch_buffer_bytes();
  }).join();

  EXPECT_TRUE(bit_identical(fresh.y, after_large.y));
  EXPECT_TRUE(bit_identical(fresh.lse, after_large.lse));
  EXPECT_TRUE(bit_identical(fresh.dqkv, after_large.dqkv));
  EXPECT_TRUE(bit_identical(fresh.dqkv, repeated.dqkv));
  EXPECT_GT(kept_before_repeat, 0u);
  EXPECT_EQ(kept_after_repeat, kept_before_repeat);
  // Between the two readings the ledger gained the repeat's outputs, which are still alive,
  // and nothing else.
  EXPECT_EQ(ledger_after_repeat - ledger_before_repeat,
            static_cast<std::int64_t>(repeated.y.bytes() + repeated.lse.bytes() +
                                      repeated.dqkv.bytes()));
}

TEST(Attention, ScratchPastTheMemoryCapFailsAndLeavesOutputsAsTheyWere) {
  const Case c{2, 64, 2, 32};
  const Tensor qkv = tensor_from(
      {c.rows(), 3 * c.d()}, random_vector(static_cast<std::size_t>(c.rows() * 3 * c.d()), 51));
  const Tensor dy =
      tensor_from({c.rows(), c.d()}, random_vector(static_cast<std::size_t>(c.rows() * c.d()), 52));
  const Tensor lse = filled({c.batch, c.heads, c.seq}, 1.0f);
  Tensor y = filled({c.rows(), c.d()}, 7.0f);
  Tensor dqkv = filled({c.rows(), 3 * c.d()}, 5.0f);
  Tensor lse_out = filled({c.batch, c.heads, c.seq}, 3.0f);

  MemoryLedger& ledger = MemoryLedger::process();
  ASSERT_TRUE(ledger.set_cap(ledger.current_total() + 1024).ok());
  Status forward = Status::success();
  Status backward = Status::success();
  std::thread([&] {  // a thread with no kept scratch
    forward = ops::attention_forward(qkv, c.batch, c.seq, c.heads, y, lse_out);
    backward = ops::attention_backward(dy, qkv, y, lse, c.batch, c.seq, c.heads, dqkv);
  }).join();
  ASSERT_TRUE(ledger.set_cap(std::nullopt).ok());

  for (const Status* status : {&forward, &backward}) {
    EXPECT_EQ(status->code(), StatusCode::memory_cap) << status->message();
    EXPECT_NE(status->message().find("memory cap exceeded"), std::string::npos)
        << status->message();
  }
  EXPECT_TRUE(bit_identical(y, filled(y.shape(), 7.0f)));
  EXPECT_TRUE(bit_identical(lse_out, filled(lse_out.shape(), 3.0f)));
  EXPECT_TRUE(bit_identical(dqkv, filled(dqkv.shape(), 5.0f)));
}

// The error must be `code` and its message must contain every one of `parts`.
void expect_error(const Status& status, StatusCode code, const std::vector<std::string>& parts) {
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.code(), code) << status.message();
  for (const auto& part : parts) {
    EXPECT_NE(status.message().find(part), std::string::npos)
        << "'" << status.message() << "' lacks '" << part << "'";
  }
}

TEST(Attention, RejectsShapesThatDoNotFit) {
  // batch 2, seq 32, heads 4, d 24.
  Tensor qkv = zeros({64, 72}), y = zeros({64, 24}), lse = zeros({2, 4, 32});
  Tensor dy = zeros({64, 24}), dqkv = zeros({64, 72});
  ASSERT_TRUE(ops::attention_forward(qkv, 2, 32, 4, y, lse).ok());
  ASSERT_TRUE(ops::attention_backward(dy, qkv, y, lse, 2, 32, 4, dqkv).ok());

  Tensor not_three = zeros({64, 95});
  expect_error(ops::attention_forward(not_three, 2, 32, 4, y, lse), StatusCode::shape_mismatch,
               {"attention_forward", "qkv [64, 95]", "batch 2, seq 32, heads 4", "[64, 3*d]"});
  Tensor heads_do_not_divide = zeros({64, 3 * 30});
  expect_error(ops::attention_forward(heads_do_not_divide, 2, 32, 4, y, lse),
               StatusCode::shape_mismatch, {"attention_forward", "qkv [64, 90]", "heads 4"});
  expect_error(ops::attention_forward(qkv, 2, 31, 4, y, lse), StatusCode::shape_mismatch,
               {"attention_forward", "qkv [64, 72]", "seq 31", "[62, 3*d]"});
  expect_error(ops::attention_forward(qkv, 0, 32, 4, y, lse), StatusCode::invalid_argument,
               {"attention_forward", "batch 0"});

  Tensor wrong_y = zeros({64, 25});
  expect_error(ops::attention_forward(qkv, 2, 32, 4, wrong_y, lse), StatusCode::shape_mismatch,
               {"attention_forward", "y [64, 25]", "qkv [64, 72]", "expected [64, 24]"});
  Tensor wrong_lse = zeros({2, 32, 4});
  expect_error(ops::attention_forward(qkv, 2, 32, 4, y, wrong_lse), StatusCode::shape_mismatch,
               {"attention_forward", "lse [2, 32, 4]", "expected [2, 4, 32]"});
  Tensor no_data;
  expect_error(ops::attention_forward(qkv, 2, 32, 4, y, no_data), StatusCode::shape_mismatch,
               {"attention_forward", "lse []"});

  expect_error(ops::attention_backward(dy, qkv, y, wrong_lse, 2, 32, 4, dqkv),
               StatusCode::shape_mismatch, {"attention_backward", "lse [2, 32, 4]"});
  Tensor wrong_dqkv = zeros({64, 24});
  expect_error(ops::attention_backward(dy, qkv, y, lse, 2, 32, 4, wrong_dqkv),
               StatusCode::shape_mismatch,
               {"attention_backward", "dqkv [64, 24]", "expected [64, 72]"});
  Tensor wrong_dy = zeros({32, 24});
  expect_error(ops::attention_backward(wrong_dy, qkv, y, lse, 2, 32, 4, dqkv),
               StatusCode::shape_mismatch, {"attention_backward", "dy [32, 24]"});
  expect_error(ops::attention_backward(dy, not_three, y, lse, 2, 32, 4, dqkv),
               StatusCode::shape_mismatch, {"attention_backward", "qkv [64, 95]"});
}

TEST(Attention, RejectsOutputsThatAliasInputs) {
  Tensor qkv = zeros({8, 12}), y = zeros({8, 4}), lse = zeros({1, 2, 8});
  Tensor y_in_qkv = Tensor::borrow(qkv.data(), {8, 4});
  expect_error(ops::attention_forward(qkv, 1, 8, 2, y_in_qkv, lse), StatusCode::invalid_argument,
               {"attention_forward", "y [8, 4]", "overlaps qkv [8, 12]"});
  Tensor dy = zeros({8, 4});
  ASSERT_TRUE(ops::attention_forward(qkv, 1, 8, 2, y, lse).ok());
  expect_error(ops::attention_backward(dy, qkv, y, lse, 1, 8, 2, qkv),
               StatusCode::invalid_argument, {"attention_backward", "dqkv [8, 12]", "overlaps"});
}

TEST(Attention, AcceptsBatchSeqSplitMatrices) {
  const Case c{2, 9, 2, 4};
  const auto values = random_vector(static_cast<std::size_t>(c.rows() * 3 * c.d()), 41);
  const Tensor flat = tensor_from({c.rows(), 3 * c.d()}, values);
  const Tensor split = tensor_from({c.batch, c.seq, 3 * c.d()}, values);
  Tensor y1 = zeros({c.rows(), c.d()}), y2 = zeros({c.batch, c.seq, c.d()});
  Tensor lse = zeros({c.batch, c.heads, c.seq});
  ASSERT_TRUE(ops::attention_forward(flat, c.batch, c.seq, c.heads, y1, lse).ok());
  ASSERT_TRUE(ops::attention_forward(split, c.batch, c.seq, c.heads, y2, lse).ok());
  EXPECT_EQ(std::memcmp(y1.data(), y2.data(), y1.bytes()), 0);
}

}  // namespace
}  // namespace spw
