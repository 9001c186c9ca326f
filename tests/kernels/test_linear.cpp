#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kernels/memory_ledger.hpp"
#include "kernels/ops/linear.hpp"
#include "kernels/reference/linear.hpp"
#include "op_test_support.hpp"

namespace spw {
namespace {

using testing::float_values;

using testing::bit_identical;
using testing::close_normwise;
using testing::filled;
using testing::random_vector;
using testing::tensor_from;
using testing::to_double;
using testing::zeros;

constexpr double kReferenceTolerance = 1e-6;
constexpr double kFloatTolerance = 1e-5;

std::size_t size(std::int64_t n) { return static_cast<std::size_t>(n); }

// ---------------------------------------------------------------------------------------
// (a) The reference backward against central differences of the reference forward.

TEST(LinearReference, BackwardMatchesFiniteDifferences) {
  const std::int64_t rows = 3, in = 4, out = 5;
  std::vector<double> x = random_vector(size(rows * in), 1);
  std::vector<double> w = random_vector(size(out * in), 2);
  std::vector<double> b = random_vector(size(out), 3);
  const std::vector<double> r = random_vector(size(rows * out), 4);
  auto loss = [&] {
    std::vector<double> y(size(rows * out));
    ref::linear_forward(x.data(), w.data(), b.data(), y.data(), rows, in, out);
    return testing::dot(y, r);
  };
  std::vector<double> dx(size(rows * in));
  std::vector<double> dw(size(out * in), 0.0);
  std::vector<double> db(size(out), 0.0);
  ref::linear_backward_input(r.data(), w.data(), dx.data(), rows, in, out);
  ref::linear_backward_weight(r.data(), x.data(), dw.data(), db.data(), rows, in, out);
  EXPECT_TRUE(close_normwise(dx, testing::finite_difference(x, loss), kReferenceTolerance));
  EXPECT_TRUE(close_normwise(dw, testing::finite_difference(w, loss), kReferenceTolerance));
  EXPECT_TRUE(close_normwise(db, testing::finite_difference(b, loss), kReferenceTolerance));
}

TEST(LinearReference, ForwardOfASmallCaseByHand) {
  // x = [1 2], W = [[1 0], [3 4], [-1 1]], b = [10 20 30]: y = [11, 31, 31].
  const std::vector<double> x = {1, 2}, w = {1, 0, 3, 4, -1, 1}, b = {10, 20, 30};
  std::vector<double> y(3);
  ref::linear_forward(x.data(), w.data(), b.data(), y.data(), 1, 2, 3);
  EXPECT_EQ(y, (std::vector<double>{11, 31, 31}));
  ref::linear_forward(x.data(), w.data(), static_cast<const double*>(nullptr), y.data(), 1, 2,
                      3);
  EXPECT_EQ(y, (std::vector<double>{1, 11, 1}));
}

// ---------------------------------------------------------------------------------------
// (b) The fp32 op against the double reference.

struct Case {
  std::int64_t rows, in, out;
  bool bias;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return "rows" + std::to_string(c.rows) + "_in" + std::to_string(c.in) + "_out" +
         std::to_string(c.out) + (c.bias ? "_bias" : "_nobias");
}

std::vector<Case> cases() {
  const std::int64_t rows[] = {1, 7, 33, 130};
  const std::pair<std::int64_t, std::int64_t> features[] = {
      {1, 1}, {5, 17}, {17, 5}, {1, 67}, {67, 1}, {67, 256}, {256, 67}, {256, 256},
      // Rows a multiple of 2 KiB apart: AVX-512 builds run the forward through a copy of
      // weightᵀ, with blocks of 16 and a tail (37), and the weight gradient transposed.
      {512, 37}, {1024, 48}};
  std::vector<Case> all;
  for (const std::int64_t r : rows) {
    for (const auto& [in, out] : features) {
      for (const bool bias : {false, true}) all.push_back({r, in, out, bias});
    }
  }
  return all;
}

class LinearMatchesReference : public ::testing::TestWithParam<Case> {};

TEST_P(LinearMatchesReference, ForwardAndBothBackwardCalls) {
  const Case c = GetParam();
  const auto xv = float_values(c.rows * c.in, 11);
  const auto wv = float_values(c.out * c.in, 12);
  const auto bv = float_values(c.out, 13);
  const auto dyv = float_values(c.rows * c.out, 14);
  // Gradients start non-zero: the weight-gradient call must add to what is there.
  const auto dw0 = float_values(c.out * c.in, 15);
  const auto db0 = float_values(c.out, 16);

  const Tensor x = tensor_from({c.rows, c.in}, xv);
  const Tensor w = tensor_from({c.out, c.in}, wv);
  const Tensor b = tensor_from({c.out}, bv);
  const Tensor dy = tensor_from({c.rows, c.out}, dyv);
  // Outputs start as NaN: forward and input gradient must overwrite, never read, them.
  Tensor y = filled({c.rows, c.out}, std::numeric_limits<float>::quiet_NaN());
  Tensor dx = filled({c.rows, c.in}, std::numeric_limits<float>::quiet_NaN());
  Tensor dw = tensor_from({c.out, c.in}, dw0);
  Tensor db = tensor_from({c.out}, db0);

  ASSERT_TRUE(ops::linear_forward(x, w, c.bias ? &b : nullptr, y).ok());
  ASSERT_TRUE(ops::linear_backward_input(dy, w, dx).ok());
  ASSERT_TRUE(ops::linear_backward_weight(dy, x, dw, c.bias ? &db : nullptr).ok());

  std::vector<double> want_y(size(c.rows * c.out)), want_dx(size(c.rows * c.in));
  std::vector<double> want_dw = dw0, want_db = db0;
  ref::linear_forward(xv.data(), wv.data(), c.bias ? bv.data() : nullptr, want_y.data(), c.rows,
                      c.in, c.out);
  ref::linear_backward_input(dyv.data(), wv.data(), want_dx.data(), c.rows, c.in, c.out);
  ref::linear_backward_weight(dyv.data(), xv.data(), want_dw.data(),
                              c.bias ? want_db.data() : nullptr, c.rows, c.in, c.out);

  EXPECT_TRUE(close_normwise(to_double(y), want_y, kFloatTolerance)) << "y";
  EXPECT_TRUE(close_normwise(to_double(dx), want_dx, kFloatTolerance)) << "dx";
  EXPECT_TRUE(close_normwise(to_double(dw), want_dw, kFloatTolerance)) << "dweight";
  // Without a bias gradient the bias tensor is left alone.
  EXPECT_TRUE(close_normwise(to_double(db), want_db, kFloatTolerance)) << "dbias";
}

INSTANTIATE_TEST_SUITE_P(Sizes, LinearMatchesReference, ::testing::ValuesIn(cases()), case_name);

class LinearResidualMatchesReference : public ::testing::TestWithParam<Case> {};

TEST_P(LinearResidualMatchesReference, IntoItsOwnOutputAndInPlace) {
  const Case c = GetParam();
  const auto xv = float_values(c.rows * c.in, 31);
  const auto wv = float_values(c.out * c.in, 32);
  const auto bv = float_values(c.out, 33);
  const auto rv = float_values(c.rows * c.out, 34);
  const Tensor x = tensor_from({c.rows, c.in}, xv);
  const Tensor w = tensor_from({c.out, c.in}, wv);
  const Tensor b = tensor_from({c.out}, bv);
  const Tensor residual = tensor_from({c.rows, c.out}, rv);
  Tensor y = filled({c.rows, c.out}, std::numeric_limits<float>::quiet_NaN());
  Tensor in_place = tensor_from({c.rows, c.out}, rv);

  ASSERT_TRUE(ops::linear_forward_residual(x, w, c.bias ? &b : nullptr, residual, y).ok());
  ASSERT_TRUE(ops::linear_forward_residual(x, w, c.bias ? &b : nullptr, in_place, in_place).ok());

  std::vector<double> want(size(c.rows * c.out));
  ref::linear_forward_residual(xv.data(), wv.data(), c.bias ? bv.data() : nullptr, rv.data(),
                               want.data(), c.rows, c.in, c.out);
  EXPECT_TRUE(close_normwise(to_double(y), want, kFloatTolerance)) << "y";
  EXPECT_TRUE(bit_identical(y, in_place)) << "in place";
}

INSTANTIATE_TEST_SUITE_P(Sizes, LinearResidualMatchesReference, ::testing::ValuesIn(cases()),
                         case_name);

// The scratch that the forward's copy of weightᵀ and the transposed weight gradient take
// counts against the rank's cap; a call that cannot have it fails before writing anything.
// On a fresh thread, whose scratch is still empty.
TEST(Linear, ScratchPastTheMemoryCapFailsAndLeavesOutputsAsTheyWere) {
  constexpr std::int64_t kRows = 4, kIn = 1024, kOut = 16;
  const Tensor x = tensor_from({kRows, kIn}, float_values(kRows * kIn, 21));
  const Tensor w = tensor_from({kOut, kIn}, float_values(kOut * kIn, 22));
  const Tensor b = tensor_from({kOut}, float_values(kOut, 23));
  const Tensor dy = tensor_from({kRows, kOut}, float_values(kRows * kOut, 24));
  Tensor y = filled({kRows, kOut}, 7.0f);
  Tensor dw = filled({kOut, kIn}, 5.0f);
  Tensor db = filled({kOut}, 3.0f);
  const Tensor y0 = filled({kRows, kOut}, 7.0f);
  const Tensor dw0 = filled({kOut, kIn}, 5.0f);
  const Tensor db0 = filled({kOut}, 3.0f);

  MemoryLedger& ledger = MemoryLedger::process();
  ASSERT_TRUE(ledger.set_cap(ledger.current_total() + 1024).ok());
  Status forward = Status::success();
  Status weight_gradient = Status::success();
  std::thread([&] {
    forward = ops::linear_forward(x, w, &b, y);
    weight_gradient = ops::linear_backward_weight(dy, x, dw, &db);
  }).join();
  ASSERT_TRUE(ledger.set_cap(std::nullopt).ok());

  EXPECT_EQ(weight_gradient.code(), StatusCode::memory_cap) << weight_gradient.message();
  EXPECT_NE(weight_gradient.message().find("memory cap exceeded"), std::string::npos)
      << weight_gradient.message();
  EXPECT_TRUE(bit_identical(dw, dw0));
  EXPECT_TRUE(bit_identical(db, db0));
#if defined(__AVX512F__)
  EXPECT_EQ(forward.code(), StatusCode::memory_cap) << forward.message();
  EXPECT_TRUE(bit_identical(y, y0));
#else
  EXPECT_TRUE(forward.ok()) << forward.message();  // no copy of weightᵀ without AVX-512
#endif
}

TEST(Linear, TakesMatrixViewsOfHigherRank) {
  const std::int64_t batch = 2, seq = 3, in = 5, out = 4;
  const auto xv = float_values(batch * seq * in, 21);
  const auto wv = float_values(out * in, 22);
  const auto bv = float_values(out, 23);
  const Tensor x = tensor_from({batch, seq, in}, xv);
  const Tensor w = tensor_from({out, in}, wv);
  const Tensor b = tensor_from({out}, bv);
  Tensor y3 = zeros({batch, seq, out});
  Tensor y2 = zeros({batch * seq, out});
  ASSERT_TRUE(ops::linear_forward(x, w, &b, y3).ok());
  ASSERT_TRUE(ops::linear_forward(x, w, &b, y2).ok());
  std::vector<double> want(size(batch * seq * out));
  ref::linear_forward(xv.data(), wv.data(), bv.data(), want.data(), batch * seq, in, out);
  EXPECT_TRUE(close_normwise(to_double(y3), want, kFloatTolerance));
  EXPECT_TRUE(bit_identical(y3, y2));

  Tensor dx = zeros({batch, seq, in});
  Tensor dw = zeros({out, in});
  ASSERT_TRUE(ops::linear_backward_input(y3, w, dx).ok());
  ASSERT_TRUE(ops::linear_backward_weight(y3, x, dw, nullptr).ok());
}

// ---------------------------------------------------------------------------------------
// (d) Accumulation, determinism and degenerate sizes.

TEST(Linear, WeightGradientsAccumulateAcrossCalls) {
  const std::int64_t rows = 33, in = 17, out = 67;
  const auto xv = float_values(rows * in, 31);
  const auto dyv = float_values(rows * out, 32);
  const Tensor x = tensor_from({rows, in}, xv);
  const Tensor dy = tensor_from({rows, out}, dyv);
  Tensor dw = zeros({out, in});
  Tensor db = zeros({out});
  ASSERT_TRUE(ops::linear_backward_weight(dy, x, dw, &db).ok());
  ASSERT_TRUE(ops::linear_backward_weight(dy, x, dw, &db).ok());

  std::vector<double> want_dw(size(out * in), 0.0), want_db(size(out), 0.0);
  for (int call = 0; call < 2; ++call) {
    ref::linear_backward_weight(dyv.data(), xv.data(), want_dw.data(), want_db.data(), rows, in,
                                out);
  }
  EXPECT_TRUE(close_normwise(to_double(dw), want_dw, kFloatTolerance));
  EXPECT_TRUE(close_normwise(to_double(db), want_db, kFloatTolerance));
}

struct LinearRun {
  Tensor y, dx, dw, db;
};

LinearRun run_linear(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& dy) {
  LinearRun r{zeros(dy.shape()), zeros(x.shape()), zeros(w.shape()), zeros(b.shape())};
  EXPECT_TRUE(ops::linear_forward(x, w, &b, r.y).ok());
  EXPECT_TRUE(ops::linear_backward_input(dy, w, r.dx).ok());
  EXPECT_TRUE(ops::linear_backward_weight(dy, x, r.dw, &r.db).ok());
  return r;
}

TEST(Linear, RunsAreBitIdentical) {
  const std::int64_t rows = 130, in = 256, out = 67;
  const Tensor x = tensor_from({rows, in}, float_values(rows * in, 41));
  const Tensor w = tensor_from({out, in}, float_values(out * in, 42));
  const Tensor b = tensor_from({out}, float_values(out, 43));
  const Tensor dy = tensor_from({rows, out}, float_values(rows * out, 44));
  const LinearRun first = run_linear(x, w, b, dy);
  const LinearRun second = run_linear(x, w, b, dy);
  EXPECT_TRUE(bit_identical(first.y, second.y));
  EXPECT_TRUE(bit_identical(first.dx, second.dx));
  EXPECT_TRUE(bit_identical(first.dw, second.dw));
  EXPECT_TRUE(bit_identical(first.db, second.db));
}

TEST(Linear, BiasGradientDoesNotDependOnThreadCount) {
  const std::int64_t rows = 130, in = 5, out = 67;
  const Tensor x = tensor_from({rows, in}, float_values(rows * in, 51));
  const Tensor dy = tensor_from({rows, out}, float_values(rows * out, 52));
  Tensor db1 = zeros({out}), db2 = zeros({out});
  Tensor dw1 = zeros({out, in}), dw2 = zeros({out, in});
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  ASSERT_TRUE(ops::linear_backward_weight(dy, x, dw1, &db1).ok());
  omp_set_num_threads(2);
  ASSERT_TRUE(ops::linear_backward_weight(dy, x, dw2, &db2).ok());
  omp_set_num_threads(saved);
  EXPECT_TRUE(bit_identical(db1, db2));
}

TEST(Linear, ZeroInFeaturesGiveTheBias) {
  const Tensor x = zeros({3, 0});
  const Tensor w = zeros({2, 0});
  const Tensor b = tensor_from({2}, {1.5, -2.0});
  Tensor y = filled({3, 2}, std::numeric_limits<float>::quiet_NaN());
  ASSERT_TRUE(ops::linear_forward(x, w, &b, y).ok());
  EXPECT_EQ(to_double(y), (std::vector<double>{1.5, -2.0, 1.5, -2.0, 1.5, -2.0}));
  ASSERT_TRUE(ops::linear_forward(x, w, nullptr, y).ok());
  EXPECT_EQ(to_double(y), std::vector<double>(6, 0.0));
}

TEST(Linear, ZeroOutFeaturesGiveAZeroInputGradient) {
  const Tensor dy = zeros({3, 0});
  const Tensor w = zeros({0, 2});
  Tensor dx = filled({3, 2}, std::numeric_limits<float>::quiet_NaN());
  ASSERT_TRUE(ops::linear_backward_input(dy, w, dx).ok());
  EXPECT_EQ(to_double(dx), std::vector<double>(6, 0.0));
}

TEST(Linear, ZeroRowsLeaveWeightGradientsAlone) {
  const Tensor dy = zeros({0, 3});
  const Tensor x = zeros({0, 2});
  Tensor dw = filled({3, 2}, 1.0f);
  Tensor db = filled({3}, 2.0f);
  ASSERT_TRUE(ops::linear_backward_weight(dy, x, dw, &db).ok());
  EXPECT_EQ(to_double(dw), std::vector<double>(6, 1.0));
  EXPECT_EQ(to_double(db), std::vector<double>(3, 2.0));
}

// ---------------------------------------------------------------------------------------
// (c) Bad shapes are reported, naming the op and the shapes.

void expect_mismatch(const Status& status, const std::string& message) {
  EXPECT_EQ(status.code(), StatusCode::shape_mismatch) << status.message();
  EXPECT_EQ(status.message(), message);
}

TEST(LinearShapes, ForwardRejectsMismatches) {
  const Tensor x = zeros({4, 7});
  const Tensor w = zeros({5, 8});
  const Tensor w_ok = zeros({5, 7});
  const Tensor b = zeros({6});
  Tensor y = zeros({4, 5});
  Tensor y_bad = zeros({4, 6});
  expect_mismatch(ops::linear_forward(x, w, nullptr, y),
                  "linear_forward: x [4, 7] does not fit weight [5, 8]: in features 7 vs 8");
  expect_mismatch(ops::linear_forward(x, w_ok, nullptr, y_bad),
                  "linear_forward: y [4, 6] does not fit x [4, 7] and weight [5, 7]: "
                  "expected [4, 5]");
  expect_mismatch(ops::linear_forward(x, w_ok, &b, y),
                  "linear_forward: bias [6] does not fit weight [5, 7]: expected [5]");
  expect_mismatch(ops::linear_forward(x, zeros({35}), nullptr, y),
                  "linear_forward: weight [35] is not a matrix [out, in]");
  expect_mismatch(ops::linear_forward(zeros({7}), w_ok, nullptr, y),
                  "linear_forward: x [7] is not a matrix");
  Tensor y_rows = zeros({3, 5});
  expect_mismatch(ops::linear_forward(x, w_ok, nullptr, y_rows),
                  "linear_forward: y [3, 5] does not fit x [4, 7] and weight [5, 7]: "
                  "expected [4, 5]");
}

TEST(LinearShapes, ForwardResidualRejectsMismatchesAndOverlaps) {
  const Tensor x = zeros({4, 7});
  const Tensor w = zeros({5, 7});
  Tensor y = zeros({4, 5});
  expect_mismatch(ops::linear_forward_residual(x, w, nullptr, zeros({4, 6}), y),
                  "linear_forward_residual: residual [4, 6] does not fit x [4, 7] and weight "
                  "[5, 7]: expected [4, 5]");
  // A residual that overlaps y without being y would be read after sgemm wrote over it.
  Tensor both = zeros({5, 5});
  Tensor shifted = Tensor::borrow(both.data() + 5, {4, 5});
  Tensor first = Tensor::borrow(both.data(), {4, 5});
  const Status status = ops::linear_forward_residual(x, w, nullptr, first, shifted);
  EXPECT_EQ(status.code(), StatusCode::invalid_argument);
  EXPECT_EQ(status.message(), "linear_forward_residual: y [4, 5] overlaps residual [4, 5]; "
                              "outputs must not alias inputs");
}

TEST(LinearShapes, BackwardInputRejectsMismatches) {
  const Tensor dy = zeros({4, 6});
  const Tensor w = zeros({5, 7});
  Tensor dx = zeros({4, 7});
  expect_mismatch(ops::linear_backward_input(dy, w, dx),
                  "linear_backward_input: dy [4, 6] does not fit weight [5, 7]: "
                  "out features 6 vs 5");
  Tensor dx_bad = zeros({4, 8});
  expect_mismatch(ops::linear_backward_input(zeros({4, 5}), w, dx_bad),
                  "linear_backward_input: dx [4, 8] does not fit dy [4, 5] and weight [5, 7]: "
                  "expected [4, 7]");
}

TEST(LinearShapes, BackwardWeightRejectsMismatches) {
  const Tensor dy = zeros({4, 5});
  const Tensor x = zeros({3, 7});
  const Tensor x_ok = zeros({4, 7});
  Tensor dw = zeros({5, 7});
  Tensor db = zeros({5});
  expect_mismatch(ops::linear_backward_weight(dy, x, dw, &db),
                  "linear_backward_weight: dy [4, 5] does not fit x [3, 7]: rows 4 vs 3");
  Tensor dw_bad = zeros({7, 5});
  expect_mismatch(ops::linear_backward_weight(dy, x_ok, dw_bad, &db),
                  "linear_backward_weight: dweight [7, 5] does not fit dy [4, 5] and x [4, 7]: "
                  "expected [5, 7]");
  Tensor db_bad = zeros({7});
  expect_mismatch(ops::linear_backward_weight(dy, x_ok, dw, &db_bad),
                  "linear_backward_weight: dbias [7] does not fit dy [4, 5] and x [4, 7]: "
                  "expected [5]");
}

TEST(LinearShapes, FailedCallsLeaveOutputsAlone) {
  const Tensor dy = zeros({4, 5});
  const Tensor x = zeros({4, 7});
  Tensor dw = filled({5, 7}, 1.0f);
  Tensor db_bad = filled({6}, 1.0f);
  ASSERT_FALSE(ops::linear_backward_weight(dy, x, dw, &db_bad).ok());
  EXPECT_EQ(to_double(dw), std::vector<double>(35, 1.0));
}

TEST(LinearShapes, OutputsMustNotAliasInputs) {
  Tensor x = zeros({4, 4});
  const Tensor w = zeros({4, 4});
  const Status status = ops::linear_forward(x, w, nullptr, x);
  EXPECT_EQ(status.code(), StatusCode::invalid_argument);
  EXPECT_EQ(status.message(),
            "linear_forward: y [4, 4] overlaps x [4, 4]; outputs must not alias inputs");
  Tensor dy = zeros({4, 4});
  EXPECT_EQ(ops::linear_backward_input(dy, w, dy).code(), StatusCode::invalid_argument);
  Tensor dw = zeros({4, 4});
  EXPECT_EQ(ops::linear_backward_weight(dw, x, dw, nullptr).code(),
            StatusCode::invalid_argument);
}

TEST(LinearShapes, TensorsWithoutDataAreRejected) {
  const Tensor w = zeros({2, 3});
  Tensor y = zeros({1, 2});
  const Tensor x = Tensor::borrow(nullptr, {1, 3});
  EXPECT_EQ(ops::linear_forward(x, w, nullptr, y).code(), StatusCode::invalid_argument);
}

}  // namespace
}  // namespace spw
