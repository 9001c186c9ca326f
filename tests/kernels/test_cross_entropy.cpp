#include <gtest/gtest.h>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "kernels/ops/cross_entropy.hpp"
#include "kernels/reference/cross_entropy.hpp"
#include "op_test_support.hpp"

namespace spw {
namespace {

using testing::float_values;

using testing::close_normwise;
using testing::random_vector;
using testing::tensor_from;
using testing::to_double;
using testing::zeros;

std::size_t sz(std::int64_t n) { return static_cast<std::size_t>(n); }

// Random values rounded to float, so the double reference sees exactly what the op sees.
std::vector<std::int32_t> random_targets(std::int64_t n, std::int64_t classes,
                                         std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int32_t> dist(0, static_cast<std::int32_t>(classes - 1));
  std::vector<std::int32_t> targets(sz(n));
  for (auto& t : targets) t = dist(rng);
  return targets;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

TEST(CrossEntropyReference, BackwardMatchesFiniteDifferences) {
  const std::int64_t rows = 4, classes = 6;
  std::vector<double> logits = random_vector(sz(rows * classes), 1, -3.0, 3.0);
  const std::vector<std::int32_t> targets = {2, 0, 5, 2};
  auto loss = [&] {
    return ref::cross_entropy_forward(logits.data(), targets.data(), rows, classes);
  };
  const std::vector<double> numeric = testing::finite_difference(logits, loss);
  std::vector<double> analytic(logits.size());
  ref::cross_entropy_backward(logits.data(), targets.data(), rows, classes,
                              1.0 / static_cast<double>(rows), analytic.data());
  EXPECT_TRUE(close_normwise(analytic, numeric, 1e-6));
}

struct Case {
  std::int64_t rows, classes;
  double range;  // logits uniform in [-range, range]
};

std::string case_name(const Case& c) {
  return "rows " + std::to_string(c.rows) + ", classes " + std::to_string(c.classes) +
         ", logits in ±" + std::to_string(c.range);
}

void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }

class CrossEntropyMatchesReference : public ::testing::TestWithParam<Case> {};

TEST_P(CrossEntropyMatchesReference, LossGradientAndAccuracy) {
  const Case c = GetParam();
  SCOPED_TRACE(case_name(c));
  const std::vector<double> values = float_values(c.rows * c.classes, 21, -c.range, c.range);
  const std::vector<std::int32_t> targets = random_targets(c.rows, c.classes, 22);
  // As a microbatch of a batch twice its size.
  const double scale = 1.0 / static_cast<double>(2 * c.rows);

  const double loss = ref::cross_entropy_forward(values.data(), targets.data(), c.rows,
                                                 c.classes);
  std::vector<double> grad(values.size());
  ref::cross_entropy_backward(values.data(), targets.data(), c.rows, c.classes, scale,
                              grad.data());
  const std::int64_t correct =
      ref::count_correct(values.data(), targets.data(), c.rows, c.classes);

  const Tensor logits = tensor_from({c.rows, c.classes}, values);
  Tensor dlogits = zeros({c.rows, c.classes});
  float loss_t = -1.0f;
  std::int64_t correct_t = -1;
  ASSERT_TRUE(ops::cross_entropy_forward(logits, targets, loss_t).ok());
  ASSERT_TRUE(
      ops::cross_entropy_backward(logits, targets, static_cast<float>(scale), dlogits).ok());
  ASSERT_TRUE(ops::count_correct(logits, targets, correct_t).ok());

  EXPECT_TRUE(close_normwise({static_cast<double>(loss_t)}, {loss}, 1e-5))
      << "loss " << loss_t << " vs " << loss;
  EXPECT_TRUE(close_normwise(to_double(dlogits), grad, 1e-5)) << "dlogits";
  EXPECT_EQ(correct_t, correct);

  // The chunked head's two: the summed loss (added to what was there) and the fused pass,
  // in place over a copy of the logits.
  const double rows = static_cast<double>(c.rows);
  double added = 1.0;
  ASSERT_TRUE(ops::cross_entropy_add_loss(logits, targets, added).ok());
  EXPECT_TRUE(close_normwise({added - 1.0}, {loss * rows}, 1e-5)) << "added " << added;
  Tensor fused = tensor_from({c.rows, c.classes}, values);
  double fused_sum = 0.0;
  ASSERT_TRUE(ops::cross_entropy_loss_and_gradient(fused, targets, static_cast<float>(scale), fused,
                                                   fused_sum)
                  .ok());
  EXPECT_TRUE(close_normwise({fused_sum}, {loss * rows}, 1e-5)) << "fused loss " << fused_sum;
  EXPECT_TRUE(close_normwise(to_double(fused), grad, 1e-5)) << "fused dlogits";
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (std::int64_t rows : {1, 7, 33, 130}) {
    for (std::int64_t classes : {1, 5, 17, 67, 256}) {
      cases.push_back({rows, classes, 4.0});
      cases.push_back({rows, classes, 80.0});
    }
  }
  cases.push_back({5000, 10, 3.0});  // several loss blocks
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Sizes, CrossEntropyMatchesReference, ::testing::ValuesIn(all_cases()));

TEST(CrossEntropy, StableForHugeLogits) {
  // exp(±1e4) overflows float; the max-subtracted log-sum-exp must not.
  const Tensor logits = tensor_from({3, 2}, {80, -80, 80, -80, 1e4, -1e4});
  const std::vector<std::int32_t> targets = {0, 1, 1};
  float loss = 0;
  ASSERT_TRUE(ops::cross_entropy_forward(logits, targets, loss).ok());
  EXPECT_NEAR(loss, (0.0 + 160.0 + 2e4) / 3.0, 1e-2);
  Tensor dlogits = zeros({3, 2});
  ASSERT_TRUE(ops::cross_entropy_backward(logits, targets, 1.0f, dlogits).ok());
  const std::vector<double> want = {0, 0, 1, -1, 1, -1};
  EXPECT_TRUE(close_normwise(to_double(dlogits), want, 1e-6));
}

TEST(CrossEntropy, BackwardInPlaceMatchesOutOfPlace) {
  const std::int64_t rows = 33, classes = 67;
  const std::vector<double> values = float_values(rows * classes, 31, -5.0, 5.0);
  const std::vector<std::int32_t> targets = random_targets(rows, classes, 32);
  const Tensor logits = tensor_from({rows, classes}, values);
  Tensor out = zeros({rows, classes});
  ASSERT_TRUE(ops::cross_entropy_backward(logits, targets, 0.5f, out).ok());
  Tensor in_place = tensor_from({rows, classes}, values);
  ASSERT_TRUE(ops::cross_entropy_backward(in_place, targets, 0.5f, in_place).ok());
  EXPECT_TRUE(bitwise_equal(out, in_place));
}

TEST(CrossEntropy, CountCorrectTakesTheFirstMaximum) {
  const Tensor logits = tensor_from({4, 3}, {1, 3, 2,    //
                                             5, 5, 0,    // a tie: the first wins
                                             0, 0, 0.5,  //
                                             -1, -2, -3});
  std::int64_t correct = 0;
  ASSERT_TRUE(ops::count_correct(logits, std::vector<std::int32_t>{1, 1, 2, 0}, correct).ok());
  EXPECT_EQ(correct, 3);
  ASSERT_TRUE(ops::count_correct(logits, std::vector<std::int32_t>{1, 0, 2, 0}, correct).ok());
  EXPECT_EQ(correct, 4);
}

void expect_error(const Status& s, StatusCode code, const std::string& message) {
  EXPECT_EQ(s.code(), code) << s.message();
  EXPECT_EQ(s.message(), message);
}

TEST(CrossEntropy, RejectsBadShapesAndTargets) {
  const Tensor logits = zeros({4, 10});
  std::vector<std::int32_t> targets = {0, 1, 10, 3};
  float loss = 0;
  std::int64_t correct = 0;
  Tensor dlogits = zeros({4, 10});
  expect_error(ops::cross_entropy_forward(logits, targets, loss), StatusCode::invalid_argument,
               "cross_entropy_forward: target 10 at row 2 is out of range [0, 10) of logits "
               "[4, 10]");
  expect_error(ops::cross_entropy_backward(logits, targets, 1.0f, dlogits),
               StatusCode::invalid_argument,
               "cross_entropy_backward: target 10 at row 2 is out of range [0, 10) of logits "
               "[4, 10]");
  targets[2] = -3;
  expect_error(ops::count_correct(logits, targets, correct), StatusCode::invalid_argument,
               "count_correct: target -3 at row 2 is out of range [0, 10) of logits [4, 10]");
  targets[2] = 2;

  const std::vector<std::int32_t> three = {0, 1, 2};
  expect_error(ops::cross_entropy_forward(logits, three, loss), StatusCode::shape_mismatch,
               "cross_entropy_forward: targets [3] does not fit logits [4, 10]: expected [4]");
  const Tensor flat = zeros({40});
  expect_error(ops::cross_entropy_forward(flat, targets, loss), StatusCode::shape_mismatch,
               "cross_entropy_forward: logits [40] is not a matrix [rows, classes] with rows "
               "and classes >= 1");
  const Tensor no_rows = zeros({0, 10});
  expect_error(ops::cross_entropy_forward(no_rows, {}, loss), StatusCode::shape_mismatch,
               "cross_entropy_forward: logits [0, 10] is not a matrix [rows, classes] with "
               "rows and classes >= 1");
  const Tensor null_logits = Tensor::borrow(nullptr, {4, 10});
  expect_error(ops::cross_entropy_forward(null_logits, targets, loss),
               StatusCode::invalid_argument, "cross_entropy_forward: logits [4, 10] has no data");
  Tensor dlogits_bad = zeros({4, 11});
  expect_error(ops::cross_entropy_backward(logits, targets, 1.0f, dlogits_bad),
               StatusCode::shape_mismatch,
               "cross_entropy_backward: dlogits [4, 11] does not fit logits [4, 10]: expected "
               "[4, 10]");
  expect_error(ops::cross_entropy_backward(logits, targets,
                                           std::numeric_limits<float>::infinity(), dlogits),
               StatusCode::invalid_argument,
               "cross_entropy_backward: grad_scale inf is not finite");
}

TEST(CrossEntropy, MicrobatchGradientsAddUpToTheBatch) {
  const std::int64_t rows = 40, classes = 17;
  const std::vector<double> values = float_values(rows * classes, 41, -4.0, 4.0);
  const std::vector<std::int32_t> targets = random_targets(rows, classes, 42);
  const float scale = 1.0f / static_cast<float>(rows);
  const Tensor logits = tensor_from({rows, classes}, values);
  Tensor whole = zeros({rows, classes});
  ASSERT_TRUE(ops::cross_entropy_backward(logits, targets, scale, whole).ok());
  float loss_whole = 0;
  ASSERT_TRUE(ops::cross_entropy_forward(logits, targets, loss_whole).ok());

  const std::span<const std::int32_t> all(targets);
  double loss_halves = 0;
  Tensor halves = zeros({rows, classes});
  for (std::int64_t h = 0; h < 2; ++h) {
    const Tensor part = logits.rows(h * rows / 2, rows / 2).value();
    Tensor dpart = halves.rows(h * rows / 2, rows / 2).value();
    const auto part_targets = all.subspan(sz(h * rows / 2), sz(rows / 2));
    ASSERT_TRUE(ops::cross_entropy_backward(part, part_targets, scale, dpart).ok());
    float loss = 0;
    ASSERT_TRUE(ops::cross_entropy_forward(part, part_targets, loss).ok());
    loss_halves += loss / 2.0;
  }
  EXPECT_TRUE(bitwise_equal(whole, halves));
  EXPECT_NEAR(loss_halves, loss_whole, 1e-6 * loss_whole);
}

// What lets the head compute its loss a chunk of rows at a time without changing a bit.
TEST(CrossEntropy, LossAddedInChunksOfWholeBlocksHasTheWholeMatrixsBits) {
  const std::int64_t rows = 320, classes = 37, chunk = 128;  // chunks of 128, 128 and 64
  const std::vector<double> values = float_values(rows * classes, 61, -5.0, 5.0);
  const std::vector<std::int32_t> targets = random_targets(rows, classes, 62);
  const Tensor logits = tensor_from({rows, classes}, values);
  float whole = 0;
  ASSERT_TRUE(ops::cross_entropy_forward(logits, targets, whole).ok());

  const std::span<const std::int32_t> all(targets);
  double sum = 0;
  for (std::int64_t first = 0; first < rows; first += chunk) {
    const std::int64_t count = std::min(chunk, rows - first);
    const Tensor part = logits.rows(first, count).value();
    ASSERT_TRUE(ops::cross_entropy_add_loss(part, all.subspan(sz(first), sz(count)), sum).ok());
  }
  const auto chunked = static_cast<float>(sum / static_cast<double>(rows));
  EXPECT_EQ(std::memcmp(&chunked, &whole, sizeof whole), 0) << chunked << " vs " << whole;
}

TEST(CrossEntropy, FusedPassWritesTheBackwardsGradientBitForBit) {
  const std::int64_t rows = 70, classes = 300;
  const std::vector<double> values = float_values(rows * classes, 71, -8.0, 8.0);
  const std::vector<std::int32_t> targets = random_targets(rows, classes, 72);
  const Tensor logits = tensor_from({rows, classes}, values);
  Tensor backward = zeros({rows, classes});
  ASSERT_TRUE(ops::cross_entropy_backward(logits, targets, 0.01f, backward).ok());
  Tensor fused = zeros({rows, classes});
  double sum = 0;
  ASSERT_TRUE(ops::cross_entropy_loss_and_gradient(logits, targets, 0.01f, fused, sum).ok());
  EXPECT_TRUE(bitwise_equal(backward, fused));
  float loss = 0;
  ASSERT_TRUE(ops::cross_entropy_forward(logits, targets, loss).ok());
  EXPECT_NEAR(sum / static_cast<double>(rows), loss, 1e-6 * loss);
}

TEST(CrossEntropy, ChunkOpsNameThemselvesAndLeaveTheSumOnBadInput) {
  const Tensor logits = zeros({4, 10});
  const std::vector<std::int32_t> targets = {0, 3, 10, 1};
  double sum = 2.5;
  expect_error(ops::cross_entropy_add_loss(logits, targets, sum), StatusCode::invalid_argument,
               "cross_entropy_add_loss: target 10 at row 2 is out of range [0, 10) of logits "
               "[4, 10]");
  Tensor narrow = zeros({4, 9});
  const std::vector<std::int32_t> good = {0, 3, 9, 1};
  expect_error(ops::cross_entropy_loss_and_gradient(logits, good, 1.0f, narrow, sum),
               StatusCode::shape_mismatch,
               "cross_entropy_loss_and_gradient: dlogits [4, 9] does not fit logits [4, 10]: "
               "expected [4, 10]");
  Tensor dlogits = zeros({4, 10});
  expect_error(ops::cross_entropy_loss_and_gradient(logits, good, std::nanf(""), dlogits, sum),
               StatusCode::invalid_argument,
               "cross_entropy_loss_and_gradient: grad_scale nan is not finite");
  EXPECT_EQ(sum, 2.5);
}

TEST(CrossEntropy, BitIdenticalAcrossRunsAndThreadCounts) {
  const std::int64_t rows = 3000, classes = 67;
  const std::vector<double> values = float_values(rows * classes, 51, -6.0, 6.0);
  const std::vector<std::int32_t> targets = random_targets(rows, classes, 52);
  const Tensor logits = tensor_from({rows, classes}, values);
  auto run = [&](float& loss, Tensor& grad) {
    ASSERT_TRUE(ops::cross_entropy_forward(logits, targets, loss).ok());
    ASSERT_TRUE(ops::cross_entropy_backward(logits, targets, 1.0f / 3000, grad).ok());
  };
  float a = 0, b = 0, single = 0;
  Tensor ga = zeros({rows, classes}), gb = zeros({rows, classes}), gs = zeros({rows, classes});
  run(a, ga);
  run(b, gb);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  run(single, gs);
  omp_set_num_threads(saved);
  EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0);
  EXPECT_EQ(std::memcmp(&a, &single, sizeof a), 0);
  EXPECT_TRUE(bitwise_equal(ga, gb));
  EXPECT_TRUE(bitwise_equal(ga, gs));
}

}  // namespace
}  // namespace spw
