// GELU's scalar forms, which the vector kernels (gelu_avx512.hpp, gelu_avx2.hpp) follow and
// the build without AVX2 runs: the forward through the tables of gelu_tables.hpp, the
// derivative through a rational fit.
#pragma once

#include "kernels/ops/gelu_tables.hpp"

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace spw::ops::gelu_detail {

// GELU is the one op here whose arithmetic, not memory traffic, sets its speed, and it must
// stay accurate relative to the exact function in the far left tail, where x Φ(x) is tiny but
// not zero (down to 1e-38 at x = -13). With t = |x| and Q(t) = Φ(-t), the normal tail,
//   x Φ(x) = max(x, 0) - t Q(t)
// and Q = 2^L(t) with L = log2 Q: no 1/2 + ... that cancels towards 0 on the left. L is smooth
// on t >= 0 (Φ's complex zeros lie at Re(t) < 0) and is fitted by polynomials of degree 4 on
// 16 intervals of t (gelu_tables.hpp, made by kernels/ops/fit_gelu_tables.py); 2^L is a degree-4
// polynomial scaled by vscalefps, which also rounds results in the subnormal range properly.
// The interval index is the exponent and two mantissa bits of t + 1, so on AVX-512 each
// coefficient is one vpermps from a 16-entry table. Measured against long double erfc on
// every 61st float in [-16, 16]: relative error at most 3.8e-6 where |y| >= FLT_MIN, absolute
// error at most 3.1e-44 below (the degree-4 2^f contributes 2.6e-6 of it).
//
// Past t = 14.5 (x Φ(x) below the smallest subnormal) t is clamped: 2^L(14.5) underflows to
// 0, so y = max(x, 0) exactly. NaN passes through; y(-inf) = 0, the limit (the textbook
// formula gives -inf · 0 = NaN).

using gelu_tables::kCentre;
using gelu_tables::kExp2;
using gelu_tables::kLog2Q;
using gelu_tables::kLog2QWhole;
using gelu_tables::kMaxT;

inline int interval_of(float t_plus_one) {
  return static_cast<int>((std::bit_cast<std::uint32_t>(t_plus_one) >> 21) & 15u);
}

template <std::size_t R>
inline float interval_poly(const float (&c)[R][16], int i, float u) {
  float p = c[R - 1][i];
  for (std::size_t j = R - 1; j-- > 0;) p = p * u + c[j][i];
  return p;
}

// Q(t) = Φ(-t) = mantissa 2^exponent for 0 <= t <= kMaxT. The factor that multiplies Q goes
// onto the mantissa before the scaling, so that a result in the normal range is rounded once
// even where Q itself is subnormal.
struct Tail {
  float mantissa;
  int exponent;
};

inline Tail normal_tail(float tc) {
  const int i = interval_of(tc + 1.0f);
  const float u = tc - kCentre[i];
  const float l = interval_poly(kLog2Q, i, u);
  const float n = std::nearbyint(l);
  const float f = l - n;
  float e = kExp2[4];
  for (int j = 3; j >= 0; --j) e = e * f + kExp2[j];
  return {e, static_cast<int>(n + kLog2QWhole[i])};
}

inline float gelu_scalar(float x) {
  if (std::isnan(x)) return x;
  const float t = std::abs(x);
  const float tc = t > kMaxT ? kMaxT : t;
  const Tail tail = normal_tail(tc);
  return (x > 0.0f ? x : 0.0f) - std::ldexp(tc * tail.mantissa, tail.exponent);
}

// GELU's derivative keeps the rational fit it had before the tables (absolute error 3.2e-7,
// tests/kernels/test_elementwise.cpp): Φ(x) + x φ(x) = 1/2 + c R(c²) / S(c²), c = x clamped
// to ±6, degrees 7 / 5, a weighted minimax fit made for spillway (Loeb's linearised least
// squares, then Lawson reweighting, in 40-digit arithmetic on 600 Chebyshev points of
// [0, 6]). The derivative has a zero at x = -0.75, near which no float evaluation is
// relatively accurate, so the backward is held to absolute accuracy; in the left tail
// (x < -6, where the derivative is below 4e-8 in magnitude) it returns the value at -6.
// Through the tables it cost 33 instead of 21 cycles per 16 elements (12 vpermps), which
// would have taken the backward under its bandwidth goal.
inline constexpr float kDerivR[] = {-1.5357892529036288e-11f, 2.7850869161605343e-9f,
                             -1.0088057819097111e-7f,  3.3008145004444199e-5f,
                             -0.0001481614789551983f,  0.014529995573357698f,
                             -0.04151717555485093f,    0.79788478964520042f};
inline constexpr float kDerivS[] = {5.5565721831280078e-6f, 0.00015020791469065756f,
                             0.0029522799803274079f, 0.036971818570140044f,
                             0.28130172755707336f,   1.0f};
inline constexpr float kDerivClamp = 6.0f;

template <std::size_t N>
inline float horner(const float (&c)[N], float s) {
  float p = c[0];
#pragma GCC unroll 8
  for (std::size_t i = 1; i < N; ++i) p = p * s + c[i];
  return p;
}

#pragma omp declare simd notinbranch
inline float gelu_derivative(float x) {
  const float c = x > kDerivClamp ? kDerivClamp : (x < -kDerivClamp ? -kDerivClamp : x);
  const float s = c * c;
  return 0.5f + c * horner(kDerivR, s) / horner(kDerivS, s);
}

}  // namespace spw::ops::gelu_detail
