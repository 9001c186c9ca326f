#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/ops/layernorm.hpp"
#include "kernels/reference/layernorm.hpp"
#include "op_test_support.hpp"

namespace spw {
namespace {

using testing::float_values;

using testing::close_normwise;
using testing::random_vector;
using testing::tensor_from;
using testing::to_double;
using testing::zeros;

constexpr float kEps = 1e-5f;

std::size_t sz(std::int64_t n) { return static_cast<std::size_t>(n); }

// Random values rounded to float, so the double reference sees exactly what the op sees.
bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

TEST(LayerNormReference, BackwardMatchesFiniteDifferences) {
  const std::int64_t rows = 3, d = 5;
  std::vector<double> x = random_vector(sz(rows * d), 1, -2.0, 2.0);
  std::vector<double> gamma = random_vector(sz(d), 2, 0.5, 1.5);
  std::vector<double> beta = random_vector(sz(d), 3);
  const std::vector<double> r = random_vector(sz(rows * d), 4);
  std::vector<double> y(sz(rows * d)), mean(sz(rows)), rstd(sz(rows));
  auto loss = [&] {
    ref::layernorm_forward(x.data(), gamma.data(), beta.data(), rows, d, 1e-5, y.data(),
                           mean.data(), rstd.data());
    return testing::dot(y, r);
  };
  const std::vector<double> numeric_x = testing::finite_difference(x, loss);
  const std::vector<double> numeric_gamma = testing::finite_difference(gamma, loss);
  const std::vector<double> numeric_beta = testing::finite_difference(beta, loss);

  loss();  // mean and rstd of the unperturbed x
  std::vector<double> dx(sz(rows * d)), dgamma(sz(d), 0.0), dbeta(sz(d), 0.0);
  ref::layernorm_backward_input(r.data(), x.data(), gamma.data(), mean.data(), rstd.data(), rows,
                                d, dx.data());
  ref::layernorm_backward_weight(r.data(), x.data(), mean.data(), rstd.data(), rows, d,
                                 dgamma.data(), dbeta.data());
  EXPECT_TRUE(close_normwise(dx, numeric_x, 1e-6));
  EXPECT_TRUE(close_normwise(dgamma, numeric_gamma, 1e-6));
  EXPECT_TRUE(close_normwise(dbeta, numeric_beta, 1e-6));
}

struct Case {
  std::int64_t rows, d;
  double offset;  // added to x: a large mean tests the statistics' numerical soundness
};

std::string case_name(const Case& c) {
  return "rows " + std::to_string(c.rows) + ", d " + std::to_string(c.d) + ", offset " +
         std::to_string(c.offset);
}

void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }

struct Inputs {
  std::vector<double> x, gamma, beta, dy;
};

Inputs make_inputs(const Case& c) {
  Inputs in{float_values(c.rows * c.d, 11, c.offset - 2.0, c.offset + 2.0),
            float_values(c.d, 12, 0.5, 1.5), float_values(c.d, 13, -0.5, 0.5),
            float_values(c.rows * c.d, 14)};
  return in;
}

class LayerNormMatchesReference : public ::testing::TestWithParam<Case> {};

TEST_P(LayerNormMatchesReference, ForwardAndBackward) {
  const Case c = GetParam();
  SCOPED_TRACE(case_name(c));
  const Inputs in = make_inputs(c);

  std::vector<double> y(sz(c.rows * c.d)), mean(sz(c.rows)), rstd(sz(c.rows));
  ref::layernorm_forward(in.x.data(), in.gamma.data(), in.beta.data(), c.rows, c.d,
                         static_cast<double>(kEps), y.data(), mean.data(), rstd.data());
  std::vector<double> dx(sz(c.rows * c.d));
  ref::layernorm_backward_input(in.dy.data(), in.x.data(), in.gamma.data(), mean.data(),
                                rstd.data(), c.rows, c.d, dx.data());
  // Accumulating onto nonzero gradients checks that the op adds instead of overwriting.
  std::vector<double> dgamma = float_values(c.d, 15), dbeta = float_values(c.d, 16);
  Tensor dg = tensor_from({c.d}, dgamma);
  Tensor db = tensor_from({c.d}, dbeta);
  ref::layernorm_backward_weight(in.dy.data(), in.x.data(), mean.data(), rstd.data(), c.rows,
                                 c.d, dgamma.data(), dbeta.data());

  const Tensor x = tensor_from({c.rows, c.d}, in.x);
  const Tensor gamma = tensor_from({c.d}, in.gamma);
  const Tensor beta = tensor_from({c.d}, in.beta);
  const Tensor dy = tensor_from({c.rows, c.d}, in.dy);
  Tensor y_t = zeros({c.rows, c.d}), mean_t = zeros({c.rows}), rstd_t = zeros({c.rows});
  Tensor dx_t = zeros({c.rows, c.d});
  ASSERT_TRUE(ops::layernorm_forward(x, gamma, beta, kEps, y_t, mean_t, rstd_t).ok());
  ASSERT_TRUE(ops::layernorm_backward_input(dy, x, gamma, mean_t, rstd_t, dx_t).ok());
  ASSERT_TRUE(ops::layernorm_backward_weight(dy, x, mean_t, rstd_t, dg, db).ok());

  EXPECT_TRUE(close_normwise(to_double(y_t), y, 1e-5)) << "y";
  EXPECT_TRUE(close_normwise(to_double(mean_t), mean, 1e-5)) << "mean";
  EXPECT_TRUE(close_normwise(to_double(rstd_t), rstd, 1e-5)) << "rstd";
  EXPECT_TRUE(close_normwise(to_double(dx_t), dx, 1e-5)) << "dx";
  EXPECT_TRUE(close_normwise(to_double(dg), dgamma, 1e-5)) << "dgamma";
  EXPECT_TRUE(close_normwise(to_double(db), dbeta, 1e-5)) << "dbeta";
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (std::int64_t rows : {1, 7, 33, 130}) {
    for (std::int64_t d : {1, 5, 17, 67, 256}) cases.push_back({rows, d, 0.5});
  }
  // Far from zero, E[x²] - E[x]² would lose the variance; x - mean needs mean in float
  // accurate to a fraction of the spread, so the offset stays within ~100 spreads here.
  cases.push_back({33, 256, 100.0});
  cases.push_back({7, 67, -100.0});
  cases.push_back({300, 768, 0.0});  // several row chunks and column tiles
  // Widths that are a multiple of 16 take the AVX-512 rows (d 16, 256, 512; 144 leaves the
  // weight gradient a column block of 1 vector past its blocks of 8); past 512 (528) the
  // forward's width is a run-time count and the input gradient takes the generic loops; 520
  // is no multiple of 16: generic loops throughout. 67 rows: an odd last row.
  for (std::int64_t d : {16, 144, 512, 520, 528}) cases.push_back({67, d, 0.5});
  cases.push_back({130, 256, 100.0});
  // Four-row blocks of the forward: rows 8 (whole blocks), 9 (a block of one row after
  // them); d 1024 (rows of 4 KiB) and 48 (an odd number of vectors). From d 1024 the weight
  // gradient sweeps tiles of 8 rows: 8 and 9 rows, and 67 rows at d 1040 (8 tiles and 3
  // rows, 8 column blocks and one of a single vector).
  for (std::int64_t d : {48, 1024}) {
    for (std::int64_t rows : {8, 9}) cases.push_back({rows, d, 0.5});
  }
  cases.push_back({67, 1040, 0.5});
  // Without AVX-512 the AVX2 rows take every width, in vectors of 8 and a masked last one:
  // d 7 (a masked vector only), 8 (one whole vector), 9 and 23 (whole vectors and a tail of
  // 1 and 7 lanes). Rows 7 and 33: groups of the weight gradient that are no multiple of its
  // four rows at a time.
  for (std::int64_t d : {7, 8, 9, 23}) {
    for (std::int64_t rows : {7, 33}) cases.push_back({rows, d, 0.5});
  }
  cases.push_back({130, 23, -100.0});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Sizes, LayerNormMatchesReference, ::testing::ValuesIn(all_cases()));

TEST(LayerNorm, StatisticsStayAccurateFarFromZero) {
  // A mean 1000 times the spread: the naive one-pass variance would keep about 3 digits.
  const Case c{33, 256, 1000.0};
  const Inputs in = make_inputs(c);
  std::vector<double> y(sz(c.rows * c.d)), mean(sz(c.rows)), rstd(sz(c.rows));
  ref::layernorm_forward(in.x.data(), in.gamma.data(), in.beta.data(), c.rows, c.d,
                         static_cast<double>(kEps), y.data(), mean.data(), rstd.data());
  const Tensor x = tensor_from({c.rows, c.d}, in.x);
  const Tensor gamma = tensor_from({c.d}, in.gamma);
  const Tensor beta = tensor_from({c.d}, in.beta);
  Tensor y_t = zeros({c.rows, c.d}), mean_t = zeros({c.rows}), rstd_t = zeros({c.rows});
  ASSERT_TRUE(ops::layernorm_forward(x, gamma, beta, kEps, y_t, mean_t, rstd_t).ok());
  EXPECT_TRUE(close_normwise(to_double(mean_t), mean, 1e-7)) << "mean";
  EXPECT_TRUE(close_normwise(to_double(rstd_t), rstd, 1e-6)) << "rstd";
}

// The forward of `in` against the reference: mean and rstd to 1e-6, y to 1e-5.
void expect_forward_accurate(const Case& c, const Inputs& in) {
  const std::int64_t d = c.d;
  std::vector<double> y(sz(c.rows * d)), mean(sz(c.rows)), rstd(sz(c.rows));
  ref::layernorm_forward(in.x.data(), in.gamma.data(), in.beta.data(), c.rows, d,
                         static_cast<double>(kEps), y.data(), mean.data(), rstd.data());
  const Tensor x = tensor_from({c.rows, d}, in.x);
  const Tensor gamma = tensor_from({d}, in.gamma);
  const Tensor beta = tensor_from({d}, in.beta);
  Tensor y_t = zeros({c.rows, d}), mean_t = zeros({c.rows}), rstd_t = zeros({c.rows});
  ASSERT_TRUE(ops::layernorm_forward(x, gamma, beta, kEps, y_t, mean_t, rstd_t).ok());
  EXPECT_TRUE(close_normwise(to_double(mean_t), mean, 1e-6)) << "mean, d " << d;
  EXPECT_TRUE(close_normwise(to_double(rstd_t), rstd, 1e-6)) << "rstd, d " << d;
  EXPECT_TRUE(close_normwise(to_double(y_t), y, 1e-5)) << "y, d " << d;
}

// The AVX-512 rows shift by each row's first element; a row whose first element is an outlier
// (here 1000 spreads away, as a large activation in one feature can be) must not lose the
// variance to cancellation. 5 rows: a whole block of four and a block of one.
TEST(LayerNorm, StatisticsStayAccurateWhenTheFirstElementIsAnOutlier) {
  for (const std::int64_t d : {256, 512, 1024, 67, 5, 13}) {
    const Case c{5, d, 0.0};
    Inputs in = make_inputs(c);
    for (std::int64_t i = 0; i < c.rows; ++i) in.x[sz(i * d)] = i % 2 == 0 ? 1000.0 : -3000.0;
    expect_forward_accurate(c, in);
  }
}

// Outlier first elements in some rows of a block only: those rows take the second pass, the
// others in the same block keep their one-pass statistics.
TEST(LayerNorm, StatisticsStayAccurateWithOutliersInSomeRowsOfABlock) {
  for (const std::int64_t d : {256, 1024, 13}) {
    const Case c{11, d, 0.0};
    Inputs in = make_inputs(c);
    for (const std::int64_t i : {1, 4, 7, 10}) in.x[sz(i * d)] = i % 2 == 0 ? 2000.0 : -500.0;
    expect_forward_accurate(c, in);
  }
}

TEST(LayerNorm, ConstantRowNormalisesToBeta) {
  const Tensor x = tensor_from({2, 4}, {3, 3, 3, 3, -1, -1, -1, -1});
  const Tensor gamma = tensor_from({4}, {1, 2, 3, 4});
  const Tensor beta = tensor_from({4}, {0.5, -0.5, 1, 0});
  Tensor y = zeros({2, 4}), mean = zeros({2}), rstd = zeros({2});
  ASSERT_TRUE(ops::layernorm_forward(x, gamma, beta, kEps, y, mean, rstd).ok());
  for (int i = 0; i < 8; ++i) EXPECT_EQ(y.data()[i], beta.data()[i % 4]);
  EXPECT_EQ(mean.data()[0], 3.0f);
  EXPECT_NEAR(rstd.data()[1], 1.0 / std::sqrt(1e-5), 1e-2);
}

TEST(LayerNorm, AcceptsBatchSeqLayouts) {
  const Case c{6, 17, 0.0};
  const Inputs in = make_inputs(c);
  const Tensor x2 = tensor_from({6, 17}, in.x);
  const Tensor x3 = tensor_from({2, 3, 17}, in.x);
  const Tensor gamma = tensor_from({17}, in.gamma);
  const Tensor beta = tensor_from({17}, in.beta);
  Tensor y2 = zeros({6, 17}), m2 = zeros({6}), r2 = zeros({6});
  Tensor y3 = zeros({2, 3, 17}), m3 = zeros({2, 3}), r3 = zeros({2, 3});
  ASSERT_TRUE(ops::layernorm_forward(x2, gamma, beta, kEps, y2, m2, r2).ok());
  const Status s = ops::layernorm_forward(x3, gamma, beta, kEps, y3, m3, r3);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(bitwise_equal(y2, y3));
  EXPECT_TRUE(bitwise_equal(r2, r3));
}

TEST(LayerNorm, InPlaceMatchesOutOfPlace) {
  const Case c{33, 67, 0.0};
  const Inputs in = make_inputs(c);
  const Tensor x = tensor_from({c.rows, c.d}, in.x);
  const Tensor gamma = tensor_from({c.d}, in.gamma);
  const Tensor beta = tensor_from({c.d}, in.beta);
  const Tensor dy = tensor_from({c.rows, c.d}, in.dy);
  Tensor y = zeros({c.rows, c.d}), mean = zeros({c.rows}), rstd = zeros({c.rows});
  Tensor dx = zeros({c.rows, c.d});
  ASSERT_TRUE(ops::layernorm_forward(x, gamma, beta, kEps, y, mean, rstd).ok());
  ASSERT_TRUE(ops::layernorm_backward_input(dy, x, gamma, mean, rstd, dx).ok());

  Tensor xy = tensor_from({c.rows, c.d}, in.x);
  Tensor mean2 = zeros({c.rows}), rstd2 = zeros({c.rows});
  ASSERT_TRUE(ops::layernorm_forward(xy, gamma, beta, kEps, xy, mean2, rstd2).ok());
  EXPECT_TRUE(bitwise_equal(xy, y));
  Tensor dyx = tensor_from({c.rows, c.d}, in.dy);
  ASSERT_TRUE(ops::layernorm_backward_input(dyx, x, gamma, mean, rstd, dyx).ok());
  EXPECT_TRUE(bitwise_equal(dyx, dx));
}

void expect_error(const Status& s, StatusCode code, const std::string& message) {
  EXPECT_EQ(s.code(), code) << s.message();
  EXPECT_EQ(s.message(), message);
}

TEST(LayerNorm, RejectsBadShapesAndValues) {
  const Tensor x = zeros({4, 8});
  const Tensor gamma = zeros({8}), beta = zeros({8});
  Tensor y = zeros({4, 8}), mean = zeros({4}), rstd = zeros({4});
  const Tensor gamma7 = zeros({7});
  expect_error(ops::layernorm_forward(x, gamma7, beta, kEps, y, mean, rstd),
               StatusCode::shape_mismatch,
               "layernorm_forward: gamma [7] does not fit x [4, 8]: expected [8]");
  expect_error(ops::layernorm_forward(x, gamma, gamma7, kEps, y, mean, rstd),
               StatusCode::shape_mismatch,
               "layernorm_forward: beta [7] does not fit x [4, 8]: expected [8]");
  Tensor y_bad = zeros({4, 9});
  expect_error(ops::layernorm_forward(x, gamma, beta, kEps, y_bad, mean, rstd),
               StatusCode::shape_mismatch,
               "layernorm_forward: y [4, 9] does not fit x [4, 8]: expected [4, 8]");
  Tensor mean_bad = zeros({5});
  expect_error(ops::layernorm_forward(x, gamma, beta, kEps, y, mean_bad, rstd),
               StatusCode::shape_mismatch,
               "layernorm_forward: mean [5] does not fit x [4, 8]: expected [4]");
  expect_error(ops::layernorm_forward(x, gamma, beta, kEps, y, mean, mean_bad),
               StatusCode::shape_mismatch,
               "layernorm_forward: rstd [5] does not fit x [4, 8]: expected [4]");
  const Tensor vec = zeros({8});
  expect_error(ops::layernorm_forward(vec, gamma, beta, kEps, y, mean, rstd),
               StatusCode::shape_mismatch,
               "layernorm_forward: x [8] is not a matrix [rows, d] with d >= 1");
  expect_error(ops::layernorm_forward(x, gamma, beta, 0.0f, y, mean, rstd),
               StatusCode::invalid_argument,
               "layernorm_forward: eps 0 must be positive and finite (a constant row would "
               "divide by zero)");
  expect_error(ops::layernorm_forward(x, gamma, beta, -1.0f, y, mean, rstd),
               StatusCode::invalid_argument,
               "layernorm_forward: eps -1 must be positive and finite (a constant row would "
               "divide by zero)");

  const Tensor null_x = Tensor::borrow(nullptr, {4, 8});
  expect_error(ops::layernorm_forward(null_x, gamma, beta, kEps, y, mean, rstd),
               StatusCode::invalid_argument, "layernorm_forward: x [4, 8] has no data");

  const Tensor dy_bad = zeros({3, 8});
  Tensor dx = zeros({4, 8});
  expect_error(ops::layernorm_backward_input(dy_bad, x, gamma, mean, rstd, dx),
               StatusCode::shape_mismatch,
               "layernorm_backward_input: dy [3, 8] does not fit x [4, 8]: expected [4, 8]");
  Tensor dx_bad = zeros({32});
  expect_error(ops::layernorm_backward_input(y, x, gamma, mean, rstd, dx_bad),
               StatusCode::shape_mismatch,
               "layernorm_backward_input: dx [32] does not fit x [4, 8]: expected [4, 8]");
  expect_error(ops::layernorm_backward_input(y, x, gamma7, mean, rstd, dx),
               StatusCode::shape_mismatch,
               "layernorm_backward_input: gamma [7] does not fit x [4, 8]: expected [8]");

  Tensor dgamma = zeros({8}), dbeta_bad = zeros({1, 8});
  expect_error(ops::layernorm_backward_weight(y, x, mean, rstd, dgamma, dbeta_bad),
               StatusCode::shape_mismatch,
               "layernorm_backward_weight: dbeta [1, 8] does not fit x [4, 8]: expected [8]");
  expect_error(ops::layernorm_backward_weight(y, x, mean_bad, rstd, dgamma, dgamma),
               StatusCode::shape_mismatch,
               "layernorm_backward_weight: mean [5] does not fit x [4, 8]: expected [4]");
}

struct Outputs {
  Tensor y, mean, rstd, dx, dgamma, dbeta;
};

// Forward, input gradient, and the weight gradient accumulated `accumulations` times.
Outputs run_all(const Case& c, int accumulations) {
  const Inputs in = make_inputs(c);
  const Tensor x = tensor_from({c.rows, c.d}, in.x);
  const Tensor gamma = tensor_from({c.d}, in.gamma);
  const Tensor beta = tensor_from({c.d}, in.beta);
  const Tensor dy = tensor_from({c.rows, c.d}, in.dy);
  Outputs r{zeros({c.rows, c.d}), zeros({c.rows}), zeros({c.rows}),
        zeros({c.rows, c.d}), zeros({c.d}), zeros({c.d})};
  EXPECT_TRUE(ops::layernorm_forward(x, gamma, beta, kEps, r.y, r.mean, r.rstd).ok());
  EXPECT_TRUE(ops::layernorm_backward_input(dy, x, gamma, r.mean, r.rstd, r.dx).ok());
  for (int k = 0; k < accumulations; ++k) {
    EXPECT_TRUE(ops::layernorm_backward_weight(dy, x, r.mean, r.rstd, r.dgamma, r.dbeta).ok());
  }
  return r;
}

TEST(LayerNorm, WeightGradientsAccumulate) {
  const Case c{130, 67, 0.0};
  const Outputs once = run_all(c, 1);
  const Outputs twice = run_all(c, 2);
  for (std::int64_t j = 0; j < c.d; ++j) {
    // Each call adds the same float total, so two calls give exactly twice one call.
    EXPECT_EQ(twice.dgamma.data()[j], 2.0f * once.dgamma.data()[j]);
    EXPECT_EQ(twice.dbeta.data()[j], 2.0f * once.dbeta.data()[j]);
  }
}

void expect_bitwise_equal(const Outputs& a, const Outputs& b) {
  EXPECT_TRUE(bitwise_equal(a.y, b.y));
  EXPECT_TRUE(bitwise_equal(a.mean, b.mean));
  EXPECT_TRUE(bitwise_equal(a.rstd, b.rstd));
  EXPECT_TRUE(bitwise_equal(a.dx, b.dx));
  EXPECT_TRUE(bitwise_equal(a.dgamma, b.dgamma));
  EXPECT_TRUE(bitwise_equal(a.dbeta, b.dbeta));
}

// d 300 takes the generic loops, 256 and 1024 the four-row blocks (257 rows: a last block of
// one row; 130: of two, and threads whose ranges end mid-tensor). At d 1024 one thread sums
// the weight gradient in tiles of rows and two threads do not: the same bits all the same.
// Without AVX-512 every width takes the AVX2 rows: d 67 and 5 end in masked vectors, and 257
// and 130 rows split into thread ranges and weight-gradient groups that are no multiple of 4.
TEST(LayerNorm, BitIdenticalAcrossRunsAndThreadCounts) {
  for (const Case c : {Case{257, 300, 0.25}, Case{257, 256, 0.25}, Case{130, 1024, 0.25},
                       Case{257, 67, 0.25}, Case{130, 5, 0.25}}) {
    SCOPED_TRACE(case_name(c));
    const Outputs a = run_all(c, 2);
    expect_bitwise_equal(a, run_all(c, 2));
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    const Outputs single = run_all(c, 2);
    omp_set_num_threads(saved);
    expect_bitwise_equal(a, single);
  }
}

// On one thread, rows of 4 KiB or more take the weight gradient's tiles of 8 rows (two
// threads, as the other tests run, do not): 9 rows (a tile and one row) and 67 at d 1040
// (8 tiles and 3 rows, 8 column blocks and one of a single vector).
TEST(LayerNorm, WeightGradientTilesMatchTheReference) {
  for (const Case c : {Case{9, 1024, 0.5}, Case{67, 1040, 0.5}}) {
    SCOPED_TRACE(case_name(c));
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    const Outputs got = run_all(c, 1);
    omp_set_num_threads(saved);
    const Inputs in = make_inputs(c);
    std::vector<double> y(sz(c.rows * c.d)), mean(sz(c.rows)), rstd(sz(c.rows));
    ref::layernorm_forward(in.x.data(), in.gamma.data(), in.beta.data(), c.rows, c.d,
                           static_cast<double>(kEps), y.data(), mean.data(), rstd.data());
    std::vector<double> dgamma(sz(c.d), 0.0), dbeta(sz(c.d), 0.0);
    ref::layernorm_backward_weight(in.dy.data(), in.x.data(), mean.data(), rstd.data(), c.rows,
                                   c.d, dgamma.data(), dbeta.data());
    EXPECT_TRUE(close_normwise(to_double(got.dgamma), dgamma, 1e-5)) << "dgamma";
    EXPECT_TRUE(close_normwise(to_double(got.dbeta), dbeta, 1e-5)) << "dbeta";
  }
}

// The forward's four-row blocks: a row's results do not depend on where it stands in a block
// or on the rows around it. Each row alone (a block of one row repeated) must give the bits
// it gets among the others, for row counts of every remainder mod 4.
TEST(LayerNorm, ForwardRowsDoNotDependOnTheirBlock) {
  for (const std::int64_t rows : {4, 5, 6, 7, 12}) {
    for (const std::int64_t d : {16, 256, 1024, 13}) {
      const Case c{rows, d, 0.5};
      SCOPED_TRACE(case_name(c));
      const Inputs in = make_inputs(c);
      const Tensor x = tensor_from({rows, d}, in.x);
      const Tensor gamma = tensor_from({d}, in.gamma);
      const Tensor beta = tensor_from({d}, in.beta);
      Tensor y = zeros({rows, d}), mean = zeros({rows}), rstd = zeros({rows});
      ASSERT_TRUE(ops::layernorm_forward(x, gamma, beta, kEps, y, mean, rstd).ok());
      for (std::int64_t i = 0; i < rows; ++i) {
        const std::vector<double> row(in.x.begin() + i * d, in.x.begin() + (i + 1) * d);
        const Tensor xi = tensor_from({1, d}, row);
        Tensor yi = zeros({1, d}), mi = zeros({1}), ri = zeros({1});
        ASSERT_TRUE(ops::layernorm_forward(xi, gamma, beta, kEps, yi, mi, ri).ok());
        EXPECT_EQ(std::memcmp(yi.data(), y.data() + i * d, sz(d) * sizeof(float)), 0)
            << "row " << i;
        EXPECT_EQ(mi.data()[0], mean.data()[i]) << "row " << i;
        EXPECT_EQ(ri.data()[0], rstd.data()[i]) << "row " << i;
      }
    }
  }
}

// In place on the four-row blocks, with a last block that repeats the last row.
TEST(LayerNorm, InPlaceMatchesOutOfPlaceInBlocks) {
  for (const Case c : {Case{7, 256, 0.0}, Case{6, 1024, 0.0}, Case{9, 16, 0.0},
                       Case{9, 13, 0.0}, Case{3, 5, 0.0}}) {
    SCOPED_TRACE(case_name(c));
    const Inputs in = make_inputs(c);
    const Tensor x = tensor_from({c.rows, c.d}, in.x);
    const Tensor gamma = tensor_from({c.d}, in.gamma);
    const Tensor beta = tensor_from({c.d}, in.beta);
    Tensor y = zeros({c.rows, c.d}), mean = zeros({c.rows}), rstd = zeros({c.rows});
    ASSERT_TRUE(ops::layernorm_forward(x, gamma, beta, kEps, y, mean, rstd).ok());
    Tensor xy = tensor_from({c.rows, c.d}, in.x);
    Tensor mean2 = zeros({c.rows}), rstd2 = zeros({c.rows});
    ASSERT_TRUE(ops::layernorm_forward(xy, gamma, beta, kEps, xy, mean2, rstd2).ok());
    EXPECT_TRUE(bitwise_equal(xy, y));
    EXPECT_TRUE(bitwise_equal(mean2, mean));
  }
}

// The masked last vector of a row must neither write past the row (into the next row, or past
// the tensor) nor take lanes past it into a sum: outputs borrowed from a buffer with guard
// values after them, and inputs followed by NaN, which a stray lane would carry into the
// results.
TEST(LayerNorm, MaskedTailsStayInsideTheirRows) {
  constexpr float kGuard = -12345.0f;
  constexpr std::int64_t kSlack = 16;
  for (const std::int64_t d : {5, 13, 67}) {
    const Case c{9, d, 0.5};
    SCOPED_TRACE(case_name(c));
    const Inputs in = make_inputs(c);
    const std::int64_t n = c.rows * d;
    auto with_nan_after = [&](const std::vector<double>& v) {
      std::vector<float> buffer(sz(static_cast<std::int64_t>(v.size()) + kSlack),
                                std::nanf(""));
      for (std::size_t i = 0; i < v.size(); ++i) buffer[i] = static_cast<float>(v[i]);
      return buffer;
    };
    std::vector<float> xb = with_nan_after(in.x), dyb = with_nan_after(in.dy);
    std::vector<float> gb = with_nan_after(in.gamma), bb = with_nan_after(in.beta);
    const Tensor x = Tensor::borrow(xb.data(), {c.rows, d});
    const Tensor dy = Tensor::borrow(dyb.data(), {c.rows, d});
    const Tensor gamma = Tensor::borrow(gb.data(), {d});
    const Tensor beta = Tensor::borrow(bb.data(), {d});
    std::vector<float> yb(sz(n + kSlack), kGuard), dxb(sz(n + kSlack), kGuard);
    std::vector<float> dgb(sz(d + kSlack), kGuard), dbb(sz(d + kSlack), kGuard);
    for (std::int64_t j = 0; j < d; ++j) dgb[sz(j)] = dbb[sz(j)] = 0.0f;
    Tensor y = Tensor::borrow(yb.data(), {c.rows, d});
    Tensor dx = Tensor::borrow(dxb.data(), {c.rows, d});
    Tensor dgamma = Tensor::borrow(dgb.data(), {d});
    Tensor dbeta = Tensor::borrow(dbb.data(), {d});
    Tensor mean = zeros({c.rows}), rstd = zeros({c.rows});
    ASSERT_TRUE(ops::layernorm_forward(x, gamma, beta, kEps, y, mean, rstd).ok());
    ASSERT_TRUE(ops::layernorm_backward_input(dy, x, gamma, mean, rstd, dx).ok());
    ASSERT_TRUE(ops::layernorm_backward_weight(dy, x, mean, rstd, dgamma, dbeta).ok());
    for (std::int64_t k = 0; k < kSlack; ++k) {
      EXPECT_EQ(yb[sz(n + k)], kGuard) << "y, " << k << " past the end";
      EXPECT_EQ(dxb[sz(n + k)], kGuard) << "dx, " << k << " past the end";
      EXPECT_EQ(dgb[sz(d + k)], kGuard) << "dgamma, " << k << " past the end";
      EXPECT_EQ(dbb[sz(d + k)], kGuard) << "dbeta, " << k << " past the end";
    }
    std::vector<double> y_ref(sz(n)), mean_ref(sz(c.rows)), rstd_ref(sz(c.rows));
    ref::layernorm_forward(in.x.data(), in.gamma.data(), in.beta.data(), c.rows, d,
                           static_cast<double>(kEps), y_ref.data(), mean_ref.data(),
                           rstd_ref.data());
    std::vector<double> dx_ref(sz(n)), dgamma_ref(sz(d), 0.0), dbeta_ref(sz(d), 0.0);
    ref::layernorm_backward_input(in.dy.data(), in.x.data(), in.gamma.data(), mean_ref.data(),
                                  rstd_ref.data(), c.rows, d, dx_ref.data());
    ref::layernorm_backward_weight(in.dy.data(), in.x.data(), mean_ref.data(), rstd_ref.data(),
                                   c.rows, d, dgamma_ref.data(), dbeta_ref.data());
    EXPECT_TRUE(close_normwise(to_double(y), y_ref, 1e-5)) << "y";
    EXPECT_TRUE(close_normwise(to_double(rstd), rstd_ref, 1e-5)) << "rstd";
    EXPECT_TRUE(close_normwise(to_double(dx), dx_ref, 1e-5)) << "dx";
    EXPECT_TRUE(close_normwise(to_double(dgamma), dgamma_ref, 1e-5)) << "dgamma";
    EXPECT_TRUE(close_normwise(to_double(dbeta), dbeta_ref, 1e-5)) << "dbeta";
  }
}

}  // namespace
}  // namespace spw
