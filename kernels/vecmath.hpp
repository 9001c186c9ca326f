// exp and erf that GCC vectorises inside `#pragma omp simd` loops. glibc's vector math
// library is only declared under -ffast-math, which would also let the compiler reorder our
// reductions; these keep IEEE semantics for everything else. Accuracy: a few ulp over the
// ranges the ops use (tests/kernels/test_vecmath.cpp measures it against libm).
#pragma once

#include <bit>
#include <cstdint>

namespace spw::vecmath {

// e^x for float, Cephes-style: x = n ln2 + r with |r| <= ln2/2, a degree-6 polynomial for
// e^r, and 2^n built in the exponent bits. Underflows to 0 below -87.3, saturates above 88.7.
#pragma omp declare simd notinbranch
inline float exp(float x) {
  constexpr float kMax = 88.3762626647949f;
  constexpr float kMin = -87.3365447504019f;
  x = x > kMax ? kMax : x;
  const bool underflow = x < kMin;
  x = x < kMin ? kMin : x;
  // rint rounds to nearest-even in the default rounding mode, like roundeven, but GCC 12
  // vectorises only rint: roundeven would leave every exp loop scalar.
  const float n = __builtin_rintf(x * 1.44269504088896341f);
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * r * r + r + 1.0f;
  const auto bits = static_cast<std::uint32_t>(static_cast<std::int32_t>(n) + 127) << 23;
  const float result = er * std::bit_cast<float>(bits);
  return underflow ? 0.0f : result;
}

// erf(x) for float, Abramowitz & Stegun 7.1.26: 1 - t(a1 + t(a2 + ...)) e^{-x^2} with
// t = 1 / (1 + p|x|); absolute error below 1.5e-7, enough for GELU's 0.5 x (1 + erf).
#pragma omp declare simd notinbranch
inline float erf(float x) {
  const float ax = x < 0.0f ? -x : x;
  const float t = 1.0f / (1.0f + 0.3275911f * ax);
  float poly = 1.061405429f;
  poly = poly * t + -1.453152027f;
  poly = poly * t + 1.421413741f;
  poly = poly * t + -0.284496736f;
  poly = poly * t + 0.254829592f;
  const float magnitude = 1.0f - poly * t * exp(-ax * ax);
  return x < 0.0f ? -magnitude : magnitude;
}

}  // namespace spw::vecmath
