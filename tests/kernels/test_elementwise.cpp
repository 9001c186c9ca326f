#include <gtest/gtest.h>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/ops/activation.hpp"
#include "kernels/ops/bias.hpp"
#include "kernels/ops/residual.hpp"
#include "kernels/reference/elementwise.hpp"
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

// ReLU's kink makes central differences meaningless within h of 0.
std::vector<double> away_from_zero(std::vector<double> v) {
  for (double& x : v) {
    if (std::abs(x) < 1e-3) x = x < 0 ? -1e-3 : 1e-3;
  }
  return v;
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The normwise error with the scale floored at 1. GELU backward's accuracy is absolute (at
// most 4e-7, pinned pointwise by GeluIsAccurateOnADenseGrid): its derivative crosses zero at
// x = -0.75 and is tiny in the left tail. With a single element, where normwise means
// pointwise relative, such a value would fail a relative test that every vector of O(1)
// activations passes. (The forward is relatively accurate everywhere:
// GeluForwardIsRelativelyAccurateOverTheWholeRange.)
::testing::AssertionResult close_at_unit_scale(const std::vector<double>& got,
                                               const std::vector<double>& want,
                                               double tolerance) {
  std::vector<double> padded_got = got, padded_want = want;
  padded_got.push_back(1.0);
  padded_want.push_back(1.0);
  return close_normwise(padded_got, padded_want, tolerance);
}

// ---------------------------------------------------------------------------------------
// (a) Reference backwards against central differences of the reference forwards, with the
// loss L = Σ y ⊙ r.

TEST(ElementwiseReference, BiasBackwardMatchesFiniteDifferences) {
  const std::int64_t rows = 4, cols = 3;
  const std::vector<double> x = random_vector(size(rows * cols), 1);
  std::vector<double> b = random_vector(size(cols), 2);
  const std::vector<double> r = random_vector(size(rows * cols), 3);
  auto loss = [&] {
    std::vector<double> y = x;
    ref::bias_forward(y.data(), b.data(), rows, cols);
    return testing::dot(y, r);
  };
  std::vector<double> db(size(cols), 0.0);
  ref::bias_backward_weight(r.data(), db.data(), rows, cols);
  EXPECT_TRUE(close_normwise(db, testing::finite_difference(b, loss), kReferenceTolerance));
}

TEST(ElementwiseReference, GeluBackwardMatchesFiniteDifferences) {
  const std::int64_t n = 40;
  std::vector<double> x = random_vector(size(n), 4, -4.0, 4.0);
  const std::vector<double> r = random_vector(size(n), 5);
  auto loss = [&] {
    std::vector<double> y(size(n));
    ref::gelu_forward(x.data(), y.data(), n);
    return testing::dot(y, r);
  };
  std::vector<double> dx(size(n));
  ref::gelu_backward(r.data(), x.data(), dx.data(), n);
  EXPECT_TRUE(close_normwise(dx, testing::finite_difference(x, loss), kReferenceTolerance));
}

TEST(ElementwiseReference, ReluBackwardMatchesFiniteDifferences) {
  const std::int64_t n = 40;
  std::vector<double> x = away_from_zero(random_vector(size(n), 6));
  const std::vector<double> r = random_vector(size(n), 7);
  auto loss = [&] {
    std::vector<double> y(size(n));
    ref::relu_forward(x.data(), y.data(), n);
    return testing::dot(y, r);
  };
  std::vector<double> dx(size(n));
  ref::relu_backward(r.data(), x.data(), dx.data(), n);
  EXPECT_TRUE(close_normwise(dx, testing::finite_difference(x, loss), kReferenceTolerance));
}

TEST(ElementwiseReference, ResidualBackwardMatchesFiniteDifferences) {
  // The gradient of y = a + b reaches both branches unchanged; the backward of the branch
  // point accumulates it into each branch's (here zero) gradient.
  const std::int64_t n = 12;
  std::vector<double> a = random_vector(size(n), 8);
  std::vector<double> b = random_vector(size(n), 9);
  const std::vector<double> r = random_vector(size(n), 10);
  auto loss = [&] {
    std::vector<double> y(size(n));
    ref::residual_forward(a.data(), b.data(), y.data(), n);
    return testing::dot(y, r);
  };
  std::vector<double> da(size(n), 0.0), db(size(n), 0.0);
  ref::accumulate(da.data(), r.data(), n);
  ref::accumulate(db.data(), r.data(), n);
  EXPECT_TRUE(close_normwise(da, testing::finite_difference(a, loss), kReferenceTolerance));
  EXPECT_TRUE(close_normwise(db, testing::finite_difference(b, loss), kReferenceTolerance));
}

TEST(ElementwiseReference, GeluKnownValues) {
  const std::vector<double> x = {0.0, 1.0, -1.0};
  std::vector<double> y(3), dx(3);
  const std::vector<double> ones(3, 1.0);
  ref::gelu_forward(x.data(), y.data(), 3);
  ref::gelu_backward(ones.data(), x.data(), dx.data(), 3);
  EXPECT_DOUBLE_EQ(y[0], 0.0);
  EXPECT_NEAR(y[1], 0.8413447460685429, 1e-15);   // Φ(1)
  EXPECT_NEAR(y[2], -0.15865525393145707, 1e-15);  // -Φ(-1)
  EXPECT_DOUBLE_EQ(dx[0], 0.5);
}

// ---------------------------------------------------------------------------------------
// (b) fp32 ops against the double reference on the same fp32 inputs.

struct Size {
  std::int64_t rows, cols;
  std::int64_t n() const { return rows * cols; }
};

std::string size_name(const ::testing::TestParamInfo<Size>& info) {
  return "rows" + std::to_string(info.param.rows) + "_cols" + std::to_string(info.param.cols);
}

std::vector<Size> sizes() {
  std::vector<Size> all;
  for (const std::int64_t rows : {1, 7, 33, 130}) {
    for (const std::int64_t cols : {1, 5, 17, 67, 256}) all.push_back({rows, cols});
  }
  return all;
}

class ElementwiseMatchesReference : public ::testing::TestWithParam<Size> {};

TEST_P(ElementwiseMatchesReference, Bias) {
  const Size s = GetParam();
  const auto yv = float_values(s.n(), 11);
  const auto bv = float_values(s.cols, 12);
  const auto db0 = float_values(s.cols, 13);
  Tensor y = tensor_from({s.rows, s.cols}, yv);
  const Tensor b = tensor_from({s.cols}, bv);
  Tensor db = tensor_from({s.cols}, db0);
  ASSERT_TRUE(ops::bias_forward(y, b).ok());
  ASSERT_TRUE(ops::bias_backward_weight(y, db).ok());

  std::vector<double> want_y = yv, want_db = db0;
  ref::bias_forward(want_y.data(), bv.data(), s.rows, s.cols);
  // The op summed the fp32 y it produced; so does the reference.
  ref::bias_backward_weight(to_double(y).data(), want_db.data(), s.rows, s.cols);
  EXPECT_TRUE(close_normwise(to_double(y), want_y, kFloatTolerance));
  EXPECT_TRUE(close_normwise(to_double(db), want_db, kFloatTolerance));
}

TEST_P(ElementwiseMatchesReference, Gelu) {
  const Size s = GetParam();
  // Wide enough to reach both tails, where erf saturates.
  const auto xv = float_values(s.n(), 21, -6.0, 6.0);
  const auto dyv = float_values(s.n(), 22);
  const Tensor x = tensor_from({s.rows, s.cols}, xv);
  const Tensor dy = tensor_from({s.rows, s.cols}, dyv);
  Tensor y = filled({s.rows, s.cols}, kNaN);
  Tensor dx = filled({s.rows, s.cols}, kNaN);
  ASSERT_TRUE(ops::gelu_forward(x, y).ok());
  ASSERT_TRUE(ops::gelu_backward(dy, x, dx).ok());

  std::vector<double> want_y(size(s.n())), want_dx(size(s.n()));
  ref::gelu_forward(xv.data(), want_y.data(), s.n());
  ref::gelu_backward(dyv.data(), xv.data(), want_dx.data(), s.n());
  EXPECT_TRUE(close_at_unit_scale(to_double(y), want_y, kFloatTolerance));
  EXPECT_TRUE(close_at_unit_scale(to_double(dx), want_dx, kFloatTolerance));
}

TEST_P(ElementwiseMatchesReference, Relu) {
  const Size s = GetParam();
  const auto xv = float_values(s.n(), 31);
  const auto dyv = float_values(s.n(), 32);
  const Tensor x = tensor_from({s.rows, s.cols}, xv);
  const Tensor dy = tensor_from({s.rows, s.cols}, dyv);
  Tensor y = filled({s.rows, s.cols}, kNaN);
  Tensor dx = filled({s.rows, s.cols}, kNaN);
  ASSERT_TRUE(ops::relu_forward(x, y).ok());
  ASSERT_TRUE(ops::relu_backward(dy, x, dx).ok());

  std::vector<double> want_y(size(s.n())), want_dx(size(s.n()));
  ref::relu_forward(xv.data(), want_y.data(), s.n());
  ref::relu_backward(dyv.data(), xv.data(), want_dx.data(), s.n());
  EXPECT_TRUE(close_normwise(to_double(y), want_y, kFloatTolerance));
  EXPECT_TRUE(close_normwise(to_double(dx), want_dx, kFloatTolerance));
}

TEST_P(ElementwiseMatchesReference, Residual) {
  const Size s = GetParam();
  const auto av = float_values(s.n(), 41);
  const auto bv = float_values(s.n(), 42);
  const Tensor a = tensor_from({s.rows, s.cols}, av);
  const Tensor b = tensor_from({s.rows, s.cols}, bv);
  Tensor y = filled({s.rows, s.cols}, kNaN);
  ASSERT_TRUE(ops::residual_forward(a, b, y).ok());
  Tensor dst = tensor_from({s.rows, s.cols}, av);
  ASSERT_TRUE(ops::accumulate(dst, b).ok());

  std::vector<double> want_y(size(s.n()));
  std::vector<double> want_dst = av;
  ref::residual_forward(av.data(), bv.data(), want_y.data(), s.n());
  ref::accumulate(want_dst.data(), bv.data(), s.n());
  EXPECT_TRUE(close_normwise(to_double(y), want_y, kFloatTolerance));
  EXPECT_TRUE(close_normwise(to_double(dst), want_dst, kFloatTolerance));
}

INSTANTIATE_TEST_SUITE_P(Sizes, ElementwiseMatchesReference, ::testing::ValuesIn(sizes()),
                         size_name);

TEST(Elementwise, GeluTailsAreFinite) {
  const std::vector<double> xv = {-100.0, -30.0, -10.0, 10.0, 30.0, 100.0};
  const Tensor x = tensor_from({1, 6}, xv);
  const Tensor dy = filled({1, 6}, 1.0f);
  Tensor y = zeros({1, 6}), dx = zeros({1, 6});
  ASSERT_TRUE(ops::gelu_forward(x, y).ok());
  ASSERT_TRUE(ops::gelu_backward(dy, x, dx).ok());
  const std::vector<double> want_y = {0, 0, 0, 10, 30, 100};
  const std::vector<double> want_dx = {0, 0, 0, 1, 1, 1};
  for (std::size_t i = 0; i < xv.size(); ++i) {
    EXPECT_NEAR(y.data()[i], want_y[i], 1e-5 * std::abs(want_y[i]) + 1e-6) << xv[i];
    EXPECT_NEAR(dx.data()[i], want_dx[i], 1e-6) << xv[i];
  }
}

// This pins the absolute accuracy of GELU forward (log2 Φ by tables or one polynomial) and
// backward (a rational fit of the derivative) pointwise, which the normwise comparisons above
// would let slip by a factor of ten.
TEST(Elementwise, GeluIsAccurateOnADenseGrid) {
  const std::int64_t n = 40001;
  std::vector<double> xv(size(n));
  for (std::int64_t i = 0; i < n; ++i)
    xv[size(i)] = -10.0 + 20.0 * static_cast<double>(i) / (n - 1);
  xv = testing::cast_vector<double>(testing::cast_vector<float>(xv));
  const Tensor x = tensor_from({1, n}, xv);
  const Tensor ones = filled({1, n}, 1.0f);
  Tensor y = zeros({1, n}), dx = zeros({1, n});
  ASSERT_TRUE(ops::gelu_forward(x, y).ok());
  ASSERT_TRUE(ops::gelu_backward(ones, x, dx).ok());
  std::vector<double> want_y(size(n)), want_dx(size(n));
  const std::vector<double> one(size(n), 1.0);
  ref::gelu_forward(xv.data(), want_y.data(), n);
  ref::gelu_backward(one.data(), xv.data(), want_dx.data(), n);
  double worst_y = 0, worst_dx = 0;
  for (std::size_t i = 0; i < size(n); ++i) {
    worst_y = std::max(worst_y, std::abs(y.data()[i] - want_y[i]));
    worst_dx = std::max(worst_dx, std::abs(dx.data()[i] - want_dx[i]));
  }
  EXPECT_LE(worst_y, 2e-6);
  EXPECT_LE(worst_dx, 4e-7);
}

// GELU forward is accurate relative to the exact function everywhere, the far left tail
// included (x Φ(x) is 1e-38 at x = -13): every 101st float of [-16, 16], every float
// magnitude from 1e-30 up, and infinities. Below the smallest normal float the error is
// judged at that scale (a subnormal has fewer bits).
TEST(Elementwise, GeluForwardIsRelativelyAccurateOverTheWholeRange) {
  std::vector<float> xs;
  for (std::uint32_t bits = 0; bits < 0x41800000u; bits += 101) {
    float v;
    std::memcpy(&v, &bits, sizeof v);
    xs.push_back(v);
    xs.push_back(-v);
  }
  for (const float v : {-13.0f, -10.0f, -6.5f, -3.0f, 1e-30f, -1e-30f, 14.5f, -14.5f, 20.0f,
                        -20.0f, 1e30f, -1e30f}) {
    xs.push_back(v);
  }
  const auto n = static_cast<std::int64_t>(xs.size());
  const std::vector<double> xd = testing::cast_vector<double>(xs);
  const Tensor x = tensor_from({1, n}, xd);
  Tensor y = filled({1, n}, kNaN);
  ASSERT_TRUE(ops::gelu_forward(x, y).ok());
  std::vector<double> want(size(n));
  ref::gelu_forward(xd.data(), want.data(), n);
  double worst = 0;
  double worst_x = 0;
  for (std::size_t i = 0; i < size(n); ++i) {
    const double scale =
        std::max(std::abs(want[i]), static_cast<double>(std::numeric_limits<float>::min()));
    const double err = std::abs(static_cast<double>(y.data()[i]) - want[i]) / scale;
    if (!(err <= worst)) {
      worst = err;
      worst_x = xd[i];
    }
  }
  EXPECT_LE(worst, 1e-5) << "at x = " << worst_x;

  const Tensor inf = tensor_from({1, 3}, {std::numeric_limits<double>::infinity(),
                                          -std::numeric_limits<double>::infinity(), 0.0});
  Tensor y_inf = zeros({1, 3});
  ASSERT_TRUE(ops::gelu_forward(inf, y_inf).ok());
  EXPECT_EQ(y_inf.data()[0], std::numeric_limits<float>::infinity());
  EXPECT_EQ(y_inf.data()[1], 0.0f);  // the limit; the formula's -inf · 0 would be NaN
  EXPECT_EQ(y_inf.data()[2], 0.0f);
}

// Below the smallest normal float, where the relative test above allows 1e-5 of FLT_MIN, the
// forward keeps its relative accuracy (4e-6 at FLT_MIN's scale is 4.7e-44) and rounds once
// into the subnormal range (vscalefps on AVX-512; on AVX2 a product by 2^(e + 64), exact, then
// by 2^-64): measured 3.1e-44 (AVX-512, every 61st float) and 3.0e-44 (AVX2, this grid) at
// most. Building 2^e in the exponent bits without the offset (garbage below 2^-126) fails.
// Every 7th float of x in [-14.6, -12.9].
TEST(Elementwise, GeluForwardRoundsSubnormalResults) {
  std::vector<float> xs;
  const auto bits_of = [](float v) { std::uint32_t b; std::memcpy(&b, &v, sizeof b); return b; };
  for (std::uint32_t bits = bits_of(12.9f); bits <= bits_of(14.6f); bits += 7) {
    float v;
    std::memcpy(&v, &bits, sizeof v);
    xs.push_back(-v);
  }
  const auto n = static_cast<std::int64_t>(xs.size());
  const std::vector<double> xd = testing::cast_vector<double>(xs);
  Tensor y = filled({1, n}, kNaN);
  ASSERT_TRUE(ops::gelu_forward(tensor_from({1, n}, xd), y).ok());
  std::vector<double> want(size(n));
  ref::gelu_forward(xd.data(), want.data(), n);
  double worst = 0;
  double worst_x = 0;
  std::int64_t subnormal = 0;
  for (std::size_t i = 0; i < size(n); ++i) {
    if (std::abs(want[i]) >= static_cast<double>(std::numeric_limits<float>::min())) continue;
    ++subnormal;
    const double err = std::abs(static_cast<double>(y.data()[i]) - want[i]);
    if (!(err <= worst)) {
      worst = err;
      worst_x = xd[i];
    }
  }
  EXPECT_GT(subnormal, n / 2);
  EXPECT_LE(worst, 5e-44) << "at x = " << worst_x;
}

TEST(Elementwise, GeluAtInfinities) {
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor x = tensor_from({1, 9}, {inf, -inf, inf, -inf, inf, -inf, inf, -inf, -inf});
  const Tensor dy = filled({1, 9}, 2.0f);
  Tensor y = zeros({1, 9}), dx = zeros({1, 9});
  ASSERT_TRUE(ops::gelu_forward(x, y).ok());
  ASSERT_TRUE(ops::gelu_backward(dy, x, dx).ok());
  for (int i = 0; i < 9; ++i) {
    const bool positive = x.data()[i] > 0;
    EXPECT_EQ(y.data()[i], positive ? std::numeric_limits<float>::infinity() : 0.0f) << i;
    EXPECT_NEAR(dx.data()[i], positive ? 2.0 : 0.0, 1e-6) << i;
  }
}

// Each element's result depends on its value alone: not on the thread count, nor on whether
// it falls in a full vector, a pair of vectors or the masked tail of a block, nor on whether a
// neighbour in its vector is in the far left tail, which takes the AVX2 forward's tables while
// the rest take one polynomial (inputs shifted by 1..8 elements put every value in every lane
// and loop, beside values near -13).
TEST(Elementwise, GeluDependsOnlyOnEachValue) {
  const std::int64_t n = 3 * 1024 + 45;
  std::vector<double> xv = float_values(n + 8, 95, -15.0, 15.0);
  for (std::int64_t i = 0; i < n + 8; i += 37)
    xv[size(i)] = -13.2 - 0.01 * static_cast<double>(i % 29);
  const std::vector<double> dyv = float_values(n + 8, 96);
  auto run = [&](std::int64_t shift, int threads) {
    const std::vector<double> xs(xv.begin() + shift, xv.begin() + shift + n);
    const std::vector<double> gs(dyv.begin() + shift, dyv.begin() + shift + n);
    std::vector<Tensor> out = {zeros({1, n}), zeros({1, n})};
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    EXPECT_TRUE(ops::gelu_forward(tensor_from({1, n}, xs), out[0]).ok());
    EXPECT_TRUE(ops::gelu_backward(tensor_from({1, n}, gs), tensor_from({1, n}, xs), out[1]).ok());
    omp_set_num_threads(saved);
    return out;
  };
  const std::vector<Tensor> base = run(0, 1);
  EXPECT_TRUE(bit_identical(base[0], run(0, 2)[0]));
  EXPECT_TRUE(bit_identical(base[1], run(0, 2)[1]));
  for (std::int64_t shift = 1; shift <= 8; ++shift) {
    const std::vector<Tensor> moved = run(shift, 1 + static_cast<int>(shift % 2));
    const std::size_t bytes = size(n - shift) * sizeof(float);
    for (int k = 0; k < 2; ++k) {
      EXPECT_EQ(std::memcmp(base[size(k)].data() + shift, moved[size(k)].data(), bytes), 0)
          << "output " << k << ", shift " << shift;
    }
  }
}

// NaN of either sign gives NaN (the AVX-512 forward sends it to the tables with the far
// left tail), in the vectors of the main loop, alone or beside far-left-tail lanes, and in
// the masked tail of a block; the values around them keep their own results.
TEST(Elementwise, GeluKeepsNaN) {
  const std::int64_t n = 4 * 64 + 17;
  std::vector<double> xs = float_values(n, 97, -4.0, 4.0);
  const std::vector<std::int64_t> positive_nan = {3, 70, 200, n - 2};
  const std::vector<std::int64_t> negative_nan = {5, 140, 210, n - 5};
  for (const std::int64_t i : positive_nan) xs[size(i)] = std::nan("");
  for (const std::int64_t i : negative_nan) xs[size(i)] = -std::nan("");
  xs[size(150)] = -9.0;  // far left tail, in the group of the NaN at 140
  xs[size(220)] = -7.0;  // and in that of 200 and 210
  const Tensor x = tensor_from({1, n}, xs);
  for (const std::int64_t i : negative_nan) ASSERT_TRUE(std::signbit(x.data()[i])) << i;
  Tensor y = zeros({1, n}), dx = zeros({1, n});
  ASSERT_TRUE(ops::gelu_forward(x, y).ok());
  ASSERT_TRUE(ops::gelu_backward(filled({1, n}, 1.0f), x, dx).ok());
  std::vector<double> want(size(n));
  ref::gelu_forward(xs.data(), want.data(), n);
  for (std::int64_t i = 0; i < n; ++i) {
    if (std::isnan(xs[size(i)])) {
      EXPECT_TRUE(std::isnan(y.data()[i])) << i;
      EXPECT_TRUE(std::isnan(dx.data()[i])) << i;
    } else {
      EXPECT_NEAR(y.data()[i], want[size(i)], 1e-5 * std::abs(want[size(i)]) + 1e-30) << i;
      EXPECT_FALSE(std::isnan(dx.data()[i])) << i;
    }
  }
}

// From 16 MiB per tensor GELU prefetches its inputs and, where the output is 32-byte
// aligned, writes it with streaming stores (activation.cpp): the same values, to the bit, as
// the same elements computed in pieces below that size, for an aligned output and for one
// that starts a float off alignment.
TEST(Elementwise, GeluOnLargeTensorsGivesTheSameBitsAsInPieces) {
  const std::int64_t n = (std::int64_t{16} << 20) / 4 + 1027;  // past 16 MiB, ragged tail
  const std::int64_t piece = std::int64_t{1} << 18;
  const auto xv = float_values(n, 61, -8.0, 4.0);
  const auto dyv = float_values(n, 62);
  const Tensor x = tensor_from({1, n}, xv);
  const Tensor dy = tensor_from({1, n}, dyv);
  Tensor want_y = zeros({1, n}), want_dx = zeros({1, n});
  for (std::int64_t at = 0; at < n; at += piece) {
    const std::int64_t len = std::min(piece, n - at);
    float* xp = const_cast<float*>(x.data()) + at;
    float* dyp = const_cast<float*>(dy.data()) + at;
    Tensor y_piece = Tensor::borrow(want_y.data() + at, {1, len});
    Tensor dx_piece = Tensor::borrow(want_dx.data() + at, {1, len});
    ASSERT_TRUE(ops::gelu_forward(Tensor::borrow(xp, {1, len}), y_piece).ok());
    ASSERT_TRUE(
        ops::gelu_backward(Tensor::borrow(dyp, {1, len}), Tensor::borrow(xp, {1, len}), dx_piece)
            .ok());
  }
  Tensor out = zeros({1, n + 8});
  for (const std::int64_t offset : {std::int64_t{0}, std::int64_t{1}}) {
    Tensor y = Tensor::borrow(out.data() + offset, {1, n});
    ASSERT_TRUE(ops::gelu_forward(x, y).ok());
    EXPECT_EQ(std::memcmp(y.data(), want_y.data(), static_cast<std::size_t>(n) * 4), 0)
        << "forward, output " << offset << " floats off alignment";
    Tensor dx = Tensor::borrow(out.data() + offset, {1, n});
    ASSERT_TRUE(ops::gelu_backward(dy, x, dx).ok());
    EXPECT_EQ(std::memcmp(dx.data(), want_dx.data(), static_cast<std::size_t>(n) * 4), 0)
        << "backward, output " << offset << " floats off alignment";
  }
}

TEST(Elementwise, OpsAcceptMatrixViewsOfHigherRank) {
  const Tensor x = tensor_from({2, 3, 4}, float_values(24, 51));
  Tensor y = zeros({6, 4});
  EXPECT_TRUE(ops::gelu_forward(x, y).ok());
  EXPECT_TRUE(ops::relu_forward(x, y).ok());
  EXPECT_TRUE(ops::residual_forward(x, x, y).ok());
  Tensor db = zeros({4});
  EXPECT_TRUE(ops::bias_backward_weight(x, db).ok());
}

// ---------------------------------------------------------------------------------------
// (d) In place, accumulation and determinism.

TEST(Elementwise, ForwardsWorkInPlace) {
  const std::int64_t rows = 33, cols = 67;
  const auto xv = float_values(rows * cols, 61, -3.0, 3.0);
  const auto bv = float_values(rows * cols, 62);
  const Tensor x = tensor_from({rows, cols}, xv);
  const Tensor b = tensor_from({rows, cols}, bv);

  auto expect_in_place_equals_out_of_place = [&](auto op, const char* name) {
    Tensor out = zeros({rows, cols});
    Tensor in_place = tensor_from({rows, cols}, xv);
    ASSERT_TRUE(op(x, out).ok()) << name;
    ASSERT_TRUE(op(in_place, in_place).ok()) << name;
    EXPECT_TRUE(bit_identical(out, in_place)) << name;
  };
  expect_in_place_equals_out_of_place(
      [](const Tensor& in, Tensor& out) { return ops::gelu_forward(in, out); }, "gelu");
  expect_in_place_equals_out_of_place(
      [](const Tensor& in, Tensor& out) { return ops::relu_forward(in, out); }, "relu");
  expect_in_place_equals_out_of_place(
      [&](const Tensor& in, Tensor& out) { return ops::residual_forward(in, b, out); },
      "residual y = a");
  expect_in_place_equals_out_of_place(
      [&](const Tensor& in, Tensor& out) { return ops::residual_forward(b, in, out); },
      "residual y = b");

  // Backward calls may overwrite the incoming gradient in place too.
  const Tensor dy = tensor_from({rows, cols}, bv);
  Tensor dx = zeros({rows, cols});
  Tensor dy_in_place = tensor_from({rows, cols}, bv);
  ASSERT_TRUE(ops::gelu_backward(dy, x, dx).ok());
  ASSERT_TRUE(ops::gelu_backward(dy_in_place, x, dy_in_place).ok());
  EXPECT_TRUE(bit_identical(dx, dy_in_place));
  dy_in_place = tensor_from({rows, cols}, bv);
  ASSERT_TRUE(ops::relu_backward(dy, x, dx).ok());
  ASSERT_TRUE(ops::relu_backward(dy_in_place, x, dy_in_place).ok());
  EXPECT_TRUE(bit_identical(dx, dy_in_place));
}

TEST(Elementwise, BiasGradientAccumulatesAcrossCalls) {
  const std::int64_t rows = 130, cols = 67;
  const auto dyv = float_values(rows * cols, 71);
  const Tensor dy = tensor_from({rows, cols}, dyv);
  Tensor db = zeros({cols});
  ASSERT_TRUE(ops::bias_backward_weight(dy, db).ok());
  ASSERT_TRUE(ops::bias_backward_weight(dy, db).ok());
  std::vector<double> want(size(cols), 0.0);
  ref::bias_backward_weight(dyv.data(), want.data(), rows, cols);
  ref::bias_backward_weight(dyv.data(), want.data(), rows, cols);
  EXPECT_TRUE(close_normwise(to_double(db), want, kFloatTolerance));
}

TEST(Elementwise, AccumulateAddsAcrossCalls) {
  const auto srcv = float_values(7 * 17, 72);
  const Tensor src = tensor_from({7, 17}, srcv);
  Tensor dst = zeros({7, 17});
  ASSERT_TRUE(ops::accumulate(dst, src).ok());
  ASSERT_TRUE(ops::accumulate(dst, src).ok());
  for (std::size_t i = 0; i < srcv.size(); ++i) {
    EXPECT_EQ(dst.data()[i], 2.0f * static_cast<float>(srcv[i]));
  }
}

TEST(Elementwise, RunsAreBitIdentical) {
  const std::int64_t rows = 130, cols = 256;
  const Tensor x = tensor_from({rows, cols}, float_values(rows * cols, 81, -4.0, 4.0));
  const Tensor dy = tensor_from({rows, cols}, float_values(rows * cols, 82));
  const Tensor b = tensor_from({cols}, float_values(cols, 83));
  auto run = [&] {
    std::vector<Tensor> out;
    for (int i = 0; i < 7; ++i) out.push_back(zeros({rows, cols}));
    out.push_back(zeros({cols}));
    EXPECT_TRUE(ops::gelu_forward(x, out[0]).ok());
    EXPECT_TRUE(ops::gelu_backward(dy, x, out[1]).ok());
    EXPECT_TRUE(ops::relu_forward(x, out[2]).ok());
    EXPECT_TRUE(ops::relu_backward(dy, x, out[3]).ok());
    EXPECT_TRUE(ops::residual_forward(x, dy, out[4]).ok());
    EXPECT_TRUE(out[5].copy_from(x).ok());
    EXPECT_TRUE(ops::accumulate(out[5], dy).ok());
    EXPECT_TRUE(out[6].copy_from(x).ok());
    EXPECT_TRUE(ops::bias_forward(out[6], b).ok());
    EXPECT_TRUE(ops::bias_backward_weight(dy, out[7]).ok());
    return out;
  };
  const std::vector<Tensor> first = run();
  const std::vector<Tensor> second = run();
  for (std::size_t i = 0; i < first.size(); ++i) {
    EXPECT_TRUE(bit_identical(first[i], second[i])) << "output " << i;
  }
}

TEST(Elementwise, BiasGradientDoesNotDependOnThreadCount) {
  for (const std::int64_t cols : {1, 17, 256, 1500}) {
    const std::int64_t rows = 300;
    const Tensor dy = tensor_from({rows, cols}, float_values(rows * cols, 91));
    Tensor one = zeros({cols}), two = zeros({cols});
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    ASSERT_TRUE(ops::bias_backward_weight(dy, one).ok());
    omp_set_num_threads(2);
    ASSERT_TRUE(ops::bias_backward_weight(dy, two).ok());
    omp_set_num_threads(saved);
    EXPECT_TRUE(bit_identical(one, two)) << "cols " << cols;
  }
}

TEST(Elementwise, EmptyTensorsAreFine) {
  const Tensor x = zeros({0, 5});
  Tensor y = zeros({0, 5});
  EXPECT_TRUE(ops::gelu_forward(x, y).ok());
  EXPECT_TRUE(ops::relu_backward(x, x, y).ok());
  EXPECT_TRUE(ops::residual_forward(x, x, y).ok());
  Tensor db = filled({5}, 1.0f);
  EXPECT_TRUE(ops::bias_backward_weight(x, db).ok());
  EXPECT_EQ(to_double(db), std::vector<double>(5, 1.0));
}

// ---------------------------------------------------------------------------------------
// (c) Bad shapes are reported, naming the op and the shapes.

void expect_mismatch(const Status& status, const std::string& message) {
  EXPECT_EQ(status.code(), StatusCode::shape_mismatch) << status.message();
  EXPECT_EQ(status.message(), message);
}

TEST(ElementwiseShapes, BiasRejectsMismatches) {
  Tensor y = zeros({4, 5});
  Tensor b = zeros({6});
  expect_mismatch(ops::bias_forward(y, b),
                  "bias_forward: bias [6] does not fit y [4, 5]: expected [5]");
  expect_mismatch(ops::bias_backward_weight(y, b),
                  "bias_backward_weight: dbias [6] does not fit dy [4, 5]: expected [5]");
  Tensor row = zeros({5});
  Tensor b5 = zeros({5});
  expect_mismatch(ops::bias_forward(row, b5),
                  "bias_forward: bias [5] does not fit y [5]: y must be a matrix [rows, cols]");
  Tensor b2d = zeros({1, 5});
  expect_mismatch(ops::bias_backward_weight(y, b2d),
                  "bias_backward_weight: dbias [1, 5] does not fit dy [4, 5]: expected [5]");
}

TEST(ElementwiseShapes, ActivationsRejectMismatches) {
  const Tensor x = zeros({4, 5});
  Tensor y = zeros({4, 6});
  expect_mismatch(ops::gelu_forward(x, y),
                  "gelu_forward: y [4, 6] does not fit x [4, 5]: shapes differ");
  expect_mismatch(ops::relu_forward(x, y),
                  "relu_forward: y [4, 6] does not fit x [4, 5]: shapes differ");
  Tensor dx = zeros({4, 5});
  const Tensor dy = zeros({5, 4});
  expect_mismatch(ops::gelu_backward(dy, x, dx),
                  "gelu_backward: dy [5, 4] does not fit x [4, 5]: shapes differ");
  expect_mismatch(ops::relu_backward(x, x, y),
                  "relu_backward: dx [4, 6] does not fit x [4, 5]: shapes differ");
}

TEST(ElementwiseShapes, ResidualRejectsMismatches) {
  const Tensor a = zeros({4, 5});
  const Tensor b = zeros({4, 6});
  Tensor y = zeros({4, 5});
  expect_mismatch(ops::residual_forward(a, b, y),
                  "residual_forward: b [4, 6] does not fit a [4, 5]: shapes differ");
  Tensor y_bad = zeros({3, 5});
  expect_mismatch(ops::residual_forward(a, a, y_bad),
                  "residual_forward: y [3, 5] does not fit a [4, 5]: shapes differ");
  expect_mismatch(ops::accumulate(y, b),
                  "accumulate: src [4, 6] does not fit dst [4, 5]: shapes differ");
}

TEST(ElementwiseShapes, PartialOverlapIsRejected) {
  Tensor buffer = zeros({2, 8});
  // Two views of one buffer, one element apart.
  const Tensor x = Tensor::borrow(buffer.data(), {1, 8});
  Tensor y = Tensor::borrow(buffer.data() + 1, {1, 8});
  const Status status = ops::gelu_forward(x, y);
  EXPECT_EQ(status.code(), StatusCode::invalid_argument);
  EXPECT_EQ(status.message(), "gelu_forward: y [1, 8] partly overlaps x [1, 8]");
  EXPECT_EQ(ops::accumulate(y, x).code(), StatusCode::invalid_argument);
  EXPECT_EQ(ops::residual_forward(x, x, y).code(), StatusCode::invalid_argument);
}

TEST(ElementwiseShapes, TensorsWithoutDataAreRejected) {
  const Tensor x = Tensor::borrow(nullptr, {2, 3});
  Tensor y = zeros({2, 3});
  EXPECT_EQ(ops::relu_forward(x, y).code(), StatusCode::invalid_argument);
  Tensor b;  // rank 0: one element and no data
  EXPECT_EQ(ops::accumulate(b, b).code(), StatusCode::invalid_argument);
}

}  // namespace
}  // namespace spw
