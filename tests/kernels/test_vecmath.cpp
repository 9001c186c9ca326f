#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/vecmath.hpp"
#include "kernels/vecmath_avx2.hpp"
#include "kernels/vecmath_avx512.hpp"

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

#if defined(__AVX2__) && defined(__FMA__)
TEST(VecMath, Exp2_8MatchesLibmAndZeroesBelowTheNormalRange) {
  double worst = 0;
  alignas(32) float x[8];
  alignas(32) float y[8];
  for (double base = -125.9; base <= 127.4; base += 8 * 0.00731) {
    for (int i = 0; i < 8; ++i) x[i] = static_cast<float>(base + 0.00731 * i);
    _mm256_store_ps(y, vecmath::exp2_8(_mm256_load_ps(x)));
    for (int i = 0; i < 8; ++i) {
      const double want = std::exp2(static_cast<double>(x[i]));
      if (x[i] >= 127.5f) continue;  // +inf from there: checked below
      worst = std::max(worst, std::abs(y[i] - want) / want);
    }
  }
  EXPECT_LT(worst, 3e-7) << "worst relative error " << worst;
  const float limits[16] = {-200.0f, -126.5f, -126.0f, 0.0f,    1.0f, -1.0f,  -INFINITY, -1e30f,
                            0.5f,    -0.5f,   127.0f,  127.5f,  1e30f, INFINITY, NAN,     -0.0f};
  for (int half = 0; half < 2; ++half) {
    _mm256_storeu_ps(y, vecmath::exp2_8(_mm256_loadu_ps(limits + 8 * half)));
    for (int i = 0; i < 8; ++i) {
      const float in = limits[8 * half + i];
      SCOPED_TRACE(in);
      if (std::isnan(in) || in < -126.0f) {
        EXPECT_EQ(y[i], 0.0f);
      } else if (in >= 127.5f) {
        EXPECT_EQ(y[i], INFINITY);
      } else {
        const double want = std::exp2(static_cast<double>(in));
        EXPECT_NEAR(y[i], want, 3e-7 * want);
      }
    }
    EXPECT_EQ(y[half == 0 ? 3 : 7], 1.0f);  // 2^0, 2^-0
  }
}
#endif

#if defined(__AVX512F__)
TEST(VecMath, Exp2_16MatchesLibmAndZeroesBelowTheNormalRange) {
  double worst = 0;
  alignas(64) float x[16];
  alignas(64) float y[16];
  for (double base = -125.9; base <= 60.0; base += 16 * 0.00731) {
    for (int i = 0; i < 16; ++i) x[i] = static_cast<float>(base + 0.00731 * i);
    _mm512_store_ps(y, vecmath::exp2_16(_mm512_load_ps(x)));
    for (int i = 0; i < 16; ++i) {
      const double want = std::exp2(static_cast<double>(x[i]));
      worst = std::max(worst, std::abs(y[i] - want) / want);
    }
  }
  EXPECT_LT(worst, 3e-7) << "worst relative error " << worst;
  const float limits[16] = {-200.0f, -126.5f, -126.0f, 0.0f, 1.0f, -1.0f, -INFINITY, -1e30f,
                            0.5f, -0.5f, 10.0f, -10.0f, 127.0f, -3.25f, 2.0f, -0.0f};
  _mm512_storeu_ps(y, vecmath::exp2_16(_mm512_loadu_ps(limits)));
  for (int i = 0; i < 16; ++i) {
    SCOPED_TRACE(limits[i]);
    if (limits[i] < -126.0f) {
      EXPECT_EQ(y[i], 0.0f);
    } else {
      const double want = std::exp2(static_cast<double>(limits[i]));
      EXPECT_NEAR(y[i], want, 3e-7 * want);
    }
  }
  EXPECT_EQ(y[3], 1.0f);   // 2^0
  EXPECT_EQ(y[15], 1.0f);  // 2^-0
}
#endif

}  // namespace
}  // namespace spw
