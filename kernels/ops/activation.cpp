#include "kernels/ops/activation.hpp"

#include "kernels/ops/gelu_tables.hpp"
#include "kernels/ops/gelu_tables_avx2.hpp"
#include "kernels/ops/op_checks.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

namespace spw::ops {

namespace {

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
// Cost: 27 instructions per 16 elements, 10 of them on Zen 4's FMA pipes and 7 vpermps
// (5 coefficients, the interval's middle and L's integer part), measured at 20 cycles per 16
// elements with the data in L1 (3.7 GHz, two vectors interleaved): 2.9 G elements/s per
// core, 23 GB/s of x read and y written. Without the vpermps the same code ran at 16 cycles.
// The rational fit used before (0.5 + x P(x²)/Q(x²), 18.5 cycles) was only accurate in
// absolute terms: 0 in place of x Φ(x) below x = -6 (relative error 1) and 1e-5 relative
// already at x = -2.6.
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

// Q(t) = Φ(-t) = mantissa 2^exponent for 0 <= t <= kMaxT. The factor that multiplies Q goes onto the mantissa before the scaling,
// so that a result in the normal range is rounded once even where Q itself is subnormal.
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
constexpr float kDerivR[] = {-1.5357892529036288e-11f, 2.7850869161605343e-9f,
                             -1.0088057819097111e-7f,  3.3008145004444199e-5f,
                             -0.0001481614789551983f,  0.014529995573357698f,
                             -0.04151717555485093f,    0.79788478964520042f};
constexpr float kDerivS[] = {5.5565721831280078e-6f, 0.00015020791469065756f,
                             0.0029522799803274079f, 0.036971818570140044f,
                             0.28130172755707336f,   1.0f};
constexpr float kDerivClamp = 6.0f;

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

#if defined(__AVX512F__)
// The zero-masking forms with a full mask are the same instructions; the plain intrinsics
// start from _mm512_undefined_ps, which GCC 12 reports as maybe-uninitialized. The vector
// functions are forced inline: GCC 12 called gelu16 once per vector, reloading the tables,
// and the forward ran 20% slower than the rational fits before it.
constexpr __mmask16 kAll = 0xFFFF;

struct Tables16 {
  __m512 centre, whole, log2q[5];
};

inline Tables16 load_tables() {
  Tables16 t{};
  t.centre = _mm512_load_ps(kCentre);
  t.whole = _mm512_load_ps(kLog2QWhole);
  for (int j = 0; j < 5; ++j) t.log2q[j] = _mm512_load_ps(kLog2Q[j]);
  return t;
}

[[gnu::always_inline]] inline __m512 lookup(__m512i index, __m512 table) {
  return _mm512_maskz_permutexvar_ps(kAll, index, table);
}

[[gnu::always_inline]] inline __m512 interval_poly16(const __m512 (&c)[5], __m512i index, __m512 u) {
  __m512 p = lookup(index, c[4]);
  p = _mm512_fmadd_ps(p, u, lookup(index, c[3]));
  p = _mm512_fmadd_ps(p, u, lookup(index, c[2]));
  p = _mm512_fmadd_ps(p, u, lookup(index, c[1]));
  return _mm512_fmadd_ps(p, u, lookup(index, c[0]));
}

// As normal_tail: t clamped to kMaxT (min returns its second operand, t, for NaN), Q's
// mantissa and exponent (for vscalefps).
struct Tail16 {
  __m512 tc, mantissa, exponent;
};

[[gnu::always_inline]] inline Tail16 normal_tail16(__m512 x, const Tables16& tables) {
  Tail16 r;
  r.tc = _mm512_maskz_min_ps(kAll, _mm512_set1_ps(kMaxT), _mm512_abs_ps(x));
  const __m512i index = _mm512_maskz_srli_epi32(
      kAll, _mm512_castps_si512(_mm512_add_ps(r.tc, _mm512_set1_ps(1.0f))), 21);
  const __m512 u = _mm512_sub_ps(r.tc, lookup(index, tables.centre));
  const __m512 l = interval_poly16(tables.log2q, index, u);
  const __m512 n =
      _mm512_maskz_roundscale_ps(kAll, l, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(l, n);
  __m512 e = _mm512_set1_ps(kExp2[4]);
  for (int j = 3; j >= 0; --j) e = _mm512_fmadd_ps(e, f, _mm512_set1_ps(kExp2[j]));
  r.mantissa = e;
  r.exponent = _mm512_add_ps(n, lookup(index, tables.whole));
  return r;
}

[[gnu::always_inline]] inline __m512 gelu16(__m512 x, const Tables16& tables) {
  const Tail16 tail = normal_tail16(x, tables);
  const __m512 tq =
      _mm512_maskz_scalef_ps(kAll, _mm512_mul_ps(tail.tc, tail.mantissa), tail.exponent);
  // max returns its second operand, x, for NaN.
  return _mm512_sub_ps(_mm512_maskz_max_ps(kAll, _mm512_setzero_ps(), x), tq);
}

// The derivative's rational fit on 16 lanes, the division replaced by a reciprocal estimate
// and one Newton step (relative error ~2^-28 before rounding, below the fit's own): vdivps
// occupies the FMA pipes for about as long as both polynomials together.
template <std::size_t N>
[[gnu::always_inline]] inline __m512 horner16(const float (&c)[N], __m512 s) {
  __m512 p = _mm512_set1_ps(c[0]);
#pragma GCC unroll 8
  for (std::size_t i = 1; i < N; ++i) p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(c[i]));
  return p;
}

[[gnu::always_inline]] inline __m512 gelu_derivative16(__m512 x) {
  // max and min return their second operand for NaN, so NaN passes through.
  const __m512 c = _mm512_maskz_min_ps(kAll, _mm512_set1_ps(kDerivClamp),
                                       _mm512_maskz_max_ps(kAll, _mm512_set1_ps(-kDerivClamp), x));
  const __m512 s = _mm512_mul_ps(c, c);
  const __m512 q = horner16(kDerivS, s);
  const __m512 r = _mm512_maskz_rcp14_ps(kAll, q);
  const __m512 inv = _mm512_fmadd_ps(r, _mm512_fnmadd_ps(q, r, _mm512_set1_ps(1.0f)), r);
  return _mm512_fmadd_ps(_mm512_mul_ps(c, horner16(kDerivR, s)), inv, _mm512_set1_ps(0.5f));
}

// out[begin, end) = f(in) or f(g, in), whole vectors and a masked tail.
template <class F>
inline void map16(const float* in, const float* g, float* out, std::int64_t begin,
                  std::int64_t end, F f) {
  std::int64_t i = begin;
  // Two vectors an iteration: GCC then interleaves their long dependent chains, which the
  // out-of-order window alone overlapped less well (GELU forward 22 -> 20 cycles per 16).
  for (; i + 32 <= end; i += 32) {
    const __m512 g0 = g != nullptr ? _mm512_loadu_ps(g + i) : _mm512_setzero_ps();
    const __m512 g1 = g != nullptr ? _mm512_loadu_ps(g + i + 16) : _mm512_setzero_ps();
    const __m512 y0 = f(g0, _mm512_loadu_ps(in + i));
    const __m512 y1 = f(g1, _mm512_loadu_ps(in + i + 16));
    _mm512_storeu_ps(out + i, y0);
    _mm512_storeu_ps(out + i + 16, y1);
  }
  for (; i + 16 <= end; i += 16) {
    const __m512 gv = g != nullptr ? _mm512_loadu_ps(g + i) : _mm512_setzero_ps();
    _mm512_storeu_ps(out + i, f(gv, _mm512_loadu_ps(in + i)));
  }
  if (i < end) {
    const auto mask = static_cast<__mmask16>((1u << (end - i)) - 1u);
    const __m512 gv = g != nullptr ? _mm512_maskz_loadu_ps(mask, g + i) : _mm512_setzero_ps();
    _mm512_mask_storeu_ps(out + i, mask, f(gv, _mm512_maskz_loadu_ps(mask, in + i)));
  }
}
#elif defined(__AVX2__) && defined(__FMA__)
// AVX2 with FMA (Zen 2/3, Intel clients): the same forms on 8 lanes. vpermps on a ymm register
// indexes 8 entries, so the forward reads gelu_tables_avx2.hpp, 8 intervals of degree 5 (index:
// the exponent and top mantissa bit of t + 1), one vpermps per coefficient: 16 intervals would
// take two and a blend each, 21 shuffles per vector instead of 8. The tables are vpermps's
// memory operands, as 16 ymm registers do not hold them beside the constants. There is no
// vscalefps: tc · mantissa is scaled by 2^(exponent + 64), built in the exponent bits (the
// exponent is -157 at least, so that factor is a normal float and the product exact), then by
// 2^-64, which rounds once, into the subnormal range too. Relative error at most 5.0e-6 where
// |y| >= FLT_MIN (every 61st float of [-16, 16] against long double erfc; the widest
// interval's polynomial sums to |L| ~ 35 before the integer part comes off), 3.0e-44 below.
//
// Lanes with x >= -5.5 (all but the far left tail, where |y| < 1.1e-7) skip the tables
// through gelu8_fast: one polynomial of degree 10 for L on [0, 5.5], both polynomials by
// Estrin's scheme. Relative error at most 5.0e-6 on either path (every 7th float of [-16, 16]).
//
// Cost on Zen 3, data in L1, inner loop alone, TSC cycles (2.445 GHz) per 8 elements, best of
// 15 alternated runs (2026-11-27): tables 19.7-21.4; the one polynomial by Horner 17.6-21.3,
// by Estrin 14.5-16.8, which is 20 FMA-pipe ops against Horner's 16. Our reading: Horner's
// chain (a dependent FMA every 4 cycles, 60-odd cycles a vector) keeps more ops waiting than
// the FP scheduler can overlap; Estrin's scheme halves it. Earlier measurements: with the 8 vpermps replaced by plain loads (wrong results)
// the tables ran 11.3; 4 intervals of degree 7 through vpermilps, n taken by the 1.5 · 2^23
// shift, or a Mills-ratio form (s = 1/(1 + t/3.5), t² split exactly, 40 instructions) were
// no faster than the tables. The backward: 10 cycles; a reciprocal estimate with a Newton
// step in place of its vdivps was no faster and less accurate.
namespace avx2_tables = gelu_tables_avx2;

[[gnu::always_inline]] inline __m256 lookup8(__m256i index, const float (&table)[8]) {
  return _mm256_permutevar8x32_ps(_mm256_load_ps(table), index);
}

[[gnu::always_inline]] inline __m256 gelu8(__m256 x) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  // min returns its second operand, |x|, for NaN.
  const __m256 tc =
      _mm256_min_ps(_mm256_set1_ps(avx2_tables::kMaxT), _mm256_and_ps(x, magnitude));
  const __m256i index =
      _mm256_srli_epi32(_mm256_castps_si256(_mm256_add_ps(tc, _mm256_set1_ps(1.0f))), 22);
  const __m256 u = _mm256_sub_ps(tc, lookup8(index, avx2_tables::kCentre));
  __m256 l = lookup8(index, avx2_tables::kLog2Q[5]);
  for (int j = 4; j >= 0; --j) l = _mm256_fmadd_ps(l, u, lookup8(index, avx2_tables::kLog2Q[j]));
  const __m256 n = _mm256_round_ps(l, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(l, n);
  __m256 mantissa = _mm256_set1_ps(avx2_tables::kExp2[4]);
  for (int j = 3; j >= 0; --j) {
    mantissa = _mm256_fmadd_ps(mantissa, f, _mm256_set1_ps(avx2_tables::kExp2[j]));
  }
  const __m256i exponent =
      _mm256_cvtps_epi32(_mm256_add_ps(n, lookup8(index, avx2_tables::kLog2QWhole)));
  const __m256 scale = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(exponent, _mm256_set1_epi32(127 + 64)), 23));
  const __m256 tq = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(tc, mantissa), scale),
                                  _mm256_set1_ps(0x1p-64f));
  // max returns its second operand, x, for NaN.
  return _mm256_sub_ps(_mm256_max_ps(_mm256_setzero_ps(), x), tq);
}

// gelu8 for lanes with x >= -kFastMaxT, through one polynomial (gelu_tables_avx2.hpp) and no
// lookups; both polynomials by Estrin's scheme (measured faster than Horner's, above). L stays
// above -26, so 2^n is built in the exponent bits directly.
[[gnu::always_inline]] inline __m256 gelu8_fast(__m256 x) {
  using avx2_tables::kExp2;
  using avx2_tables::kFastLog2Q;
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 tc =
      _mm256_min_ps(_mm256_set1_ps(avx2_tables::kFastMaxT), _mm256_and_ps(x, magnitude));
  const __m256 u = _mm256_sub_ps(tc, _mm256_set1_ps(avx2_tables::kFastCentre));
  const auto pair = [u](int j) {
    return _mm256_fmadd_ps(_mm256_set1_ps(kFastLog2Q[j + 1]), u, _mm256_set1_ps(kFastLog2Q[j]));
  };
  const __m256 u2 = _mm256_mul_ps(u, u);
  const __m256 u4 = _mm256_mul_ps(u2, u2);
  const __m256 u8 = _mm256_mul_ps(u4, u4);
  const __m256 low = _mm256_fmadd_ps(pair(2), u2, pair(0));
  const __m256 middle = _mm256_fmadd_ps(pair(6), u2, pair(4));
  const __m256 high = _mm256_fmadd_ps(_mm256_set1_ps(kFastLog2Q[10]), u2, pair(8));
  const __m256 l = _mm256_fmadd_ps(high, u8, _mm256_fmadd_ps(middle, u4, low));
  const __m256 n = _mm256_round_ps(l, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(l, n);
  const __m256 f2 = _mm256_mul_ps(f, f);
  const __m256 upper = _mm256_fmadd_ps(
      _mm256_fmadd_ps(_mm256_set1_ps(kExp2[4]), f, _mm256_set1_ps(kExp2[3])), f,
      _mm256_set1_ps(kExp2[2]));
  const __m256 mantissa = _mm256_fmadd_ps(
      upper, f2, _mm256_fmadd_ps(_mm256_set1_ps(kExp2[1]), f, _mm256_set1_ps(kExp2[0])));
  const __m256 scale = _mm256_castsi256_ps(_mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127 + avx2_tables::kFastLog2QWhole)),
      23));
  const __m256 tq = _mm256_mul_ps(_mm256_mul_ps(tc, mantissa), scale);
  return _mm256_sub_ps(_mm256_max_ps(_mm256_setzero_ps(), x), tq);
}

// Lanes below -kFastMaxT, and NaN, take the tables. A lane's path depends on its own value
// alone, never its neighbours', so results do not change with how values fall into vectors.
[[gnu::always_inline]] inline __m256 gelu8_any(__m256 x) {
  const __m256 tail =
      _mm256_cmp_ps(x, _mm256_set1_ps(-avx2_tables::kFastMaxT), _CMP_NGE_UQ);
  const __m256 y = gelu8_fast(x);
  return _mm256_testz_ps(tail, tail) ? y : _mm256_blendv_ps(y, gelu8(x), tail);
}

template <std::size_t N>
[[gnu::always_inline]] inline __m256 horner8(const float (&c)[N], __m256 s) {
  __m256 p = _mm256_set1_ps(c[0]);
#pragma GCC unroll 8
  for (std::size_t i = 1; i < N; ++i) p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(c[i]));
  return p;
}

// vdivps, not a reciprocal estimate: _mm256_rcp_ps has 12 bits, and with one Newton step
// the quotient's error (~1.5e-7) would sit on top of the fit's 3.2e-7 against the 4e-7 the
// tests hold the backward to; Zen 3's divider runs beside the FMA pipes.
[[gnu::always_inline]] inline __m256 gelu_derivative8(__m256 x) {
  // max and min return their second operand for NaN, so NaN passes through.
  const __m256 c = _mm256_min_ps(_mm256_set1_ps(kDerivClamp),
                                 _mm256_max_ps(_mm256_set1_ps(-kDerivClamp), x));
  const __m256 s = _mm256_mul_ps(c, c);
  return _mm256_add_ps(
      _mm256_div_ps(_mm256_mul_ps(c, horner8(kDerivR, s)), horner8(kDerivS, s)),
      _mm256_set1_ps(0.5f));
}

// out[begin, end) = f(in) or f(g, in): two vectors an iteration (their dependent chains
// interleave), then one, then the tail through masked loads and stores.
template <class F>
inline void map8(const float* in, const float* g, float* out, std::int64_t begin,
                 std::int64_t end, F f) {
  std::int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __m256 g0 = g != nullptr ? _mm256_loadu_ps(g + i) : _mm256_setzero_ps();
    const __m256 g1 = g != nullptr ? _mm256_loadu_ps(g + i + 8) : _mm256_setzero_ps();
    const __m256 y0 = f(g0, _mm256_loadu_ps(in + i));
    const __m256 y1 = f(g1, _mm256_loadu_ps(in + i + 8));
    _mm256_storeu_ps(out + i, y0);
    _mm256_storeu_ps(out + i + 8, y1);
  }
  for (; i + 8 <= end; i += 8) {
    const __m256 gv = g != nullptr ? _mm256_loadu_ps(g + i) : _mm256_setzero_ps();
    _mm256_storeu_ps(out + i, f(gv, _mm256_loadu_ps(in + i)));
  }
  if (i < end) {
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(end - i)),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256 gv = g != nullptr ? _mm256_maskload_ps(g + i, mask) : _mm256_setzero_ps();
    _mm256_maskstore_ps(out + i, mask, f(gv, _mm256_maskload_ps(in + i, mask)));
  }
}
#endif

Status check_unary(const char* op, const Tensor& x, const Tensor& y) {
  SPW_TRY(check_data(op, "x", x));
  SPW_TRY(check_same(op, "y", y, "x", x));
  SPW_TRY(check_data(op, "y", y));
  return check_alias(op, "y", y, "x", x);
}

Status check_backward(const char* op, const Tensor& dy, const Tensor& x, const Tensor& dx) {
  SPW_TRY(check_data(op, "x", x));
  SPW_TRY(check_same(op, "dy", dy, "x", x));
  SPW_TRY(check_same(op, "dx", dx, "x", x));
  SPW_TRY(check_data(op, "dy", dy));
  SPW_TRY(check_data(op, "dx", dx));
  SPW_TRY(check_alias(op, "dx", dx, "dy", dy));
  return check_alias(op, "dx", dx, "x", x);
}

// GELU works through its tensors in blocks of one page, so the static split of blocks is the
// allocator's first-touch split. From 16 MiB per tensor up it fetches the next block of each
// input while it computes on this one: there the hardware prefetcher alone left the forward
// at ~75% of memcpy bandwidth, against ~90% with the prefetch. Below that the tensors stay in
// cache between calls and the prefetches only cost issue slots (10-15%), so they are left out.
constexpr std::int64_t kBlock = 4096 / sizeof(float);
constexpr std::int64_t kLineFloats = 64 / sizeof(float);
constexpr std::int64_t kPrefetchFloats = (std::int64_t{16} << 20) / sizeof(float);

void prefetch_next_block(const float* data, std::int64_t end, std::int64_t n) {
  const std::int64_t count = std::min(kBlock, n - end);
  for (std::int64_t k = 0; k < count; k += kLineFloats) __builtin_prefetch(data + end + k, 0, 3);
}

}  // namespace

// The loops below split the flat elements statically, as the allocator first-touches whole
// tensors: each thread streams the pages on its own NUMA node, whatever the row length.

Status gelu_forward(const Tensor& x, Tensor& y) {
  SPW_TRY(check_unary("gelu_forward", x, y));
  const std::int64_t n = x.numel();
  const float* in = x.data();
  float* out = y.data();
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
  const bool prefetch = n >= kPrefetchFloats;
#if defined(__AVX512F__)
  const Tables16 tables = load_tables();
#endif
#pragma omp parallel for schedule(static)
  for (std::int64_t block = 0; block < blocks; ++block) {
    const std::int64_t begin = block * kBlock;
    const std::int64_t end = std::min(n, begin + kBlock);
    if (prefetch) prefetch_next_block(in, end, n);
#if defined(__AVX512F__)
    map16(in, nullptr, out, begin, end,
          [&tables](__m512, __m512 v) { return gelu16(v, tables); });
#elif defined(__AVX2__) && defined(__FMA__)
    map8(in, nullptr, out, begin, end, [](__m256, __m256 v) { return gelu8_any(v); });
#else
    for (std::int64_t i = begin; i < end; ++i) out[i] = gelu_scalar(in[i]);
#endif
  }
  return Status::success();
}

Status gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx) {
  SPW_TRY(check_backward("gelu_backward", dy, x, dx));
  const std::int64_t n = x.numel();
  const float* g = dy.data();
  const float* in = x.data();
  float* out = dx.data();
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
  const bool prefetch = n >= kPrefetchFloats;
#pragma omp parallel for schedule(static)
  for (std::int64_t block = 0; block < blocks; ++block) {
    const std::int64_t begin = block * kBlock;
    const std::int64_t end = std::min(n, begin + kBlock);
    if (prefetch) {
      prefetch_next_block(g, end, n);
      prefetch_next_block(in, end, n);
    }
#if defined(__AVX512F__)
    map16(in, g, out, begin, end,
          [](__m512 gv, __m512 v) { return _mm512_mul_ps(gv, gelu_derivative16(v)); });
#elif defined(__AVX2__) && defined(__FMA__)
    map8(in, g, out, begin, end,
         [](__m256 gv, __m256 v) { return _mm256_mul_ps(gv, gelu_derivative8(v)); });
#else
#pragma omp simd simdlen(16)
    for (std::int64_t i = begin; i < end; ++i) out[i] = g[i] * gelu_derivative(in[i]);
#endif
  }
  return Status::success();
}

Status relu_forward(const Tensor& x, Tensor& y) {
  SPW_TRY(check_unary("relu_forward", x, y));
  const std::int64_t n = x.numel();
  const float* in = x.data();
  float* out = y.data();
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < n; ++i) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
  return Status::success();
}

Status relu_backward(const Tensor& dy, const Tensor& x, Tensor& dx) {
  SPW_TRY(check_backward("relu_backward", dy, x, dx));
  const std::int64_t n = x.numel();
  const float* g = dy.data();
  const float* in = x.data();
  float* out = dx.data();
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < n; ++i) out[i] = in[i] > 0.0f ? g[i] : 0.0f;
  return Status::success();
}

}  // namespace spw::ops
