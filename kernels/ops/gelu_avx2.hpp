// GELU forward and backward on AVX2 + FMA (8 lanes), for the CPUs without AVX-512 (the Zen 3
// development machines): the forms of gelu_scalar.hpp, the forward's tables and polynomial
// from gelu_tables_avx2.hpp. activation.cpp runs them where the build machine has AVX2 and
// FMA but not AVX-512.
#pragma once

#if defined(__AVX2__) && defined(__FMA__)
#include "kernels/ops/gelu_scalar.hpp"
#include "kernels/ops/gelu_tables_avx2.hpp"

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <iterator>

namespace spw::ops::gelu_detail {

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
// A vector with any lane below -5.5 computes both paths, so the speed depends on the data:
// TSC cycles per 8 elements in L1 against the tables alone (medians of 15 alternated runs,
// 2026-11-27): uniform on [-4, 4] or N(0, 1) 12.7-13.0 against 18.2-19.0; N(-1, 2²), 8% of
// vectors mixed, 14.7 against 18.2; N(-1, 3²), 47% mixed, 22.9 against 17.9; one lane at -6
// in every vector 34.2 against 17.7. gpt-s's own GELU inputs are of the first kind: in its
// PyTorch twin (bench/pytorch/gpt_torch.py's model, trained 300 steps on the fortunes corpus,
// loss 5.48 to 2.78) they had a standard deviation of 0.3-1.0 and at most 0.13% of the
// vectors mixed (2026-11-27). A second polynomial for the tail, blended in by coefficient,
// would bound the mixed case, but the float sum of L (|L| up to 157) needs finer intervals
// than one.
//
// Cost on Zen 3, data in L1, inner loop alone, TSC cycles (2.445 GHz) per 8 elements, best of
// 15 alternated runs (2026-11-27): tables 19.7-21.4; the one polynomial by Horner 17.6-21.3,
// by Estrin 14.5-16.8, which is 20 FMA-pipe ops against Horner's 16. Our reading: Horner's
// chain (a dependent FMA every 4 cycles, 60-odd cycles a vector) keeps more ops waiting than
// the FP scheduler can overlap; Estrin's scheme halves it. Earlier measurements: with the 8
// vpermps replaced by plain loads (wrong results) the tables ran 11.3; 4 intervals of degree 7
// through vpermilps, n taken by the 1.5 · 2^23 shift, or a Mills-ratio form (s = 1/(1 +
// t/3.5), t² split exactly, 40 instructions) were no faster than the tables. The backward: 10
// cycles; a reciprocal estimate with a Newton step in place of its vdivps was no faster and
// less accurate.
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
  static_assert(std::size(kFastLog2Q) == 11 && std::size(kExp2) == 5,
                "the Estrin trees below are written for degrees 10 and 4: refit or rewrite them");
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
  const __m256i biased = _mm256_add_epi32(
      _mm256_cvtps_epi32(n), _mm256_set1_epi32(127 + avx2_tables::kFastLog2QWhole));
  const __m256 scale = _mm256_castsi256_ps(_mm256_slli_epi32(biased, 23));
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
// interleave), then one, then the tail through masked loads and stores. With Stream (out +
// begin 32-byte aligned) the whole vectors go to memory by streaming stores, which skip
// reading each line of out before writing it, and a fence ends the range, so that the stores
// are visible once the caller's threads synchronise.
template <bool Stream = false, class F>
inline void map8(const float* in, const float* g, float* out, std::int64_t begin,
                 std::int64_t end, F f) {
  auto store = [out](std::int64_t i, __m256 v) {
    if constexpr (Stream) {
      _mm256_stream_ps(out + i, v);
    } else {
      _mm256_storeu_ps(out + i, v);
    }
  };
  std::int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __m256 g0 = g != nullptr ? _mm256_loadu_ps(g + i) : _mm256_setzero_ps();
    const __m256 g1 = g != nullptr ? _mm256_loadu_ps(g + i + 8) : _mm256_setzero_ps();
    const __m256 y0 = f(g0, _mm256_loadu_ps(in + i));
    const __m256 y1 = f(g1, _mm256_loadu_ps(in + i + 8));
    store(i, y0);
    store(i + 8, y1);
  }
  for (; i + 8 <= end; i += 8) {
    const __m256 gv = g != nullptr ? _mm256_loadu_ps(g + i) : _mm256_setzero_ps();
    store(i, f(gv, _mm256_loadu_ps(in + i)));
  }
  if constexpr (Stream) _mm_sfence();
  if (i < end) {
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(end - i)),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256 gv = g != nullptr ? _mm256_maskload_ps(g + i, mask) : _mm256_setzero_ps();
    _mm256_maskstore_ps(out + i, mask, f(gv, _mm256_maskload_ps(in + i, mask)));
  }
}

}  // namespace spw::ops::gelu_detail

#endif
