#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/vecmath.hpp"

namespace spw {
namespace {

TEST(VecMath, ExpMatchesLibmToAFewUlp) {
  double worst = 0;
  for (double x = -87.0; x <= 88.0; x += 0.0137) {
    const float got = vecmath::exp(static_cast<float>(x));
    const double want = std::exp(static_cast<double>(static_cast<float>(x)));
    worst = std::max(worst, std::abs(got - want) / want);
  }
  EXPECT_LT(worst, 4e-7) << "worst relative error " << worst;
  EXPECT_EQ(vecmath::exp(-200.0f), 0.0f);
  EXPECT_EQ(vecmath::exp(0.0f), 1.0f);
  EXPECT_TRUE(std::isfinite(vecmath::exp(500.0f)));
}

TEST(VecMath, ErfMatchesLibmAbsolutely) {
  double worst = 0;
  for (double x = -6.0; x <= 6.0; x += 0.00113) {
    const float xf = static_cast<float>(x);
    worst = std::max(worst, std::abs(vecmath::erf(xf) - std::erf(static_cast<double>(xf))));
  }
  EXPECT_LT(worst, 5e-7) << "worst absolute error " << worst;
  EXPECT_EQ(vecmath::erf(0.0f), 0.0f);
}

TEST(VecMath, VectorisedLoopGivesTheScalarResults) {
  std::vector<float> x(1001), y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = -10.0f + 0.02f * static_cast<float>(i);
#pragma omp simd
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = vecmath::exp(x[i]) + vecmath::erf(x[i]);
  for (std::size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(y[i], vecmath::exp(x[i]) + vecmath::erf(x[i])) << "at " << x[i];
  }
}

}  // namespace
}  // namespace spw
