// GELU forward and backward on AVX-512 (16 lanes): the forms of gelu_scalar.hpp, each
// coefficient of the tables one 16-entry vpermps. activation.cpp runs them where the build
// machine has AVX-512 (the Zen 4 the project started on).
#pragma once

#if defined(__AVX512F__)
#include "kernels/ops/gelu_scalar.hpp"
#include "kernels/ops/gelu_tables_avx2.hpp"

#include <immintrin.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <iterator>

namespace spw::ops::gelu_detail {

// Cost of the forward: 27 instructions per 16 elements, 10 of them on Zen 4's FMA pipes and 7
// vpermps (5 coefficients, the interval's middle and L's integer part), measured at 20 cycles
// per 16 elements with the data in L1 (3.7 GHz, two vectors interleaved): 2.9 G elements/s per
// core, 23 GB/s of x read and y written. Without the vpermps the same code ran at 16 cycles.
// The rational fit used before (0.5 + x P(x²)/Q(x²), 18.5 cycles) was only accurate in
// absolute terms: 0 in place of x Φ(x) below x = -6 (relative error 1) and 1e-5 relative
// already at x = -2.6.
//
// The zero-masking forms with a full mask are the same instructions; the plain intrinsics
// start from _mm512_undefined_ps, which GCC 12 reports as maybe-uninitialized. The vector
// functions are forced inline: GCC 12 called gelu16 once per vector, reloading the tables,
// and the forward ran 20% slower than the rational fits before it.
inline constexpr __mmask16 kAll = 0xFFFF;

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

// gelu16 for lanes with x >= -kFastMaxT: the AVX2 path's one polynomial of degree 10 for L
// on [0, 5.5] (gelu_tables_avx2.hpp, fitted for any vector width) and no lookups, both
// polynomials by Estrin's scheme, 2^n by vscalefps. Same relative error bound, 5.0e-6. On
// the Zen 5, the forward's in-cache rate in bench_kernels went from 39.4-39.9 GB/s (tables
// alone) to 44.4-44.7, 1.12-1.14x (medians of 3 runs alternated, 2026-11-27): vpermps
// costs less there than on the Zen 4 or the Zen 3.
[[gnu::always_inline]] inline __m512 gelu16_fast(__m512 x) {
  using gelu_tables_avx2::kExp2;
  using gelu_tables_avx2::kFastLog2Q;
  static_assert(std::size(kFastLog2Q) == 11 && std::size(kExp2) == 5,
                "the Estrin trees below are written for degrees 10 and 4: refit or rewrite them");
  // min returns its second operand, |x|, for NaN.
  const __m512 tc = _mm512_maskz_min_ps(kAll, _mm512_set1_ps(gelu_tables_avx2::kFastMaxT),
                                        _mm512_abs_ps(x));
  const __m512 u = _mm512_sub_ps(tc, _mm512_set1_ps(gelu_tables_avx2::kFastCentre));
  const auto pair = [u](int j) {
    return _mm512_fmadd_ps(_mm512_set1_ps(kFastLog2Q[j + 1]), u, _mm512_set1_ps(kFastLog2Q[j]));
  };
  const __m512 u2 = _mm512_mul_ps(u, u);
  const __m512 u4 = _mm512_mul_ps(u2, u2);
  const __m512 u8 = _mm512_mul_ps(u4, u4);
  const __m512 low = _mm512_fmadd_ps(pair(2), u2, pair(0));
  const __m512 middle = _mm512_fmadd_ps(pair(6), u2, pair(4));
  const __m512 high = _mm512_fmadd_ps(_mm512_set1_ps(kFastLog2Q[10]), u2, pair(8));
  const __m512 l = _mm512_fmadd_ps(high, u8, _mm512_fmadd_ps(middle, u4, low));
  const __m512 n =
      _mm512_maskz_roundscale_ps(kAll, l, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(l, n);
  const __m512 f2 = _mm512_mul_ps(f, f);
  const __m512 upper = _mm512_fmadd_ps(
      _mm512_fmadd_ps(_mm512_set1_ps(kExp2[4]), f, _mm512_set1_ps(kExp2[3])), f,
      _mm512_set1_ps(kExp2[2]));
  const __m512 mantissa = _mm512_fmadd_ps(
      upper, f2, _mm512_fmadd_ps(_mm512_set1_ps(kExp2[1]), f, _mm512_set1_ps(kExp2[0])));
  const __m512 exponent =
      _mm512_add_ps(n, _mm512_set1_ps(static_cast<float>(gelu_tables_avx2::kFastLog2QWhole)));
  const __m512 tq = _mm512_maskz_scalef_ps(kAll, _mm512_mul_ps(tc, mantissa), exponent);
  return _mm512_sub_ps(_mm512_maskz_max_ps(kAll, _mm512_setzero_ps(), x), tq);
}

// Lanes below -kFastMaxT, and NaN, take the tables, and only a vector holding one computes
// both. A lane's path depends on its own value alone, never its neighbours', so results do
// not change with how values fall into vectors.
[[gnu::always_inline]] inline __m512 gelu16_any(__m512 x, const Tables16& tables) {
  const __mmask16 tail =
      _mm512_cmp_ps_mask(x, _mm512_set1_ps(-gelu_tables_avx2::kFastMaxT), _CMP_NGE_UQ);
  const __m512 y = gelu16_fast(x);
  return tail == 0 ? y : _mm512_mask_blend_ps(tail, y, gelu16(x, tables));
}

// The derivative's rational fit on 16 lanes, with vdivps. On the Zen 4 a reciprocal estimate
// and a Newton step beat it (there a 512-bit vdivps held the FMA pipes about as long as both
// polynomials); on the Zen 5 vdivps made the backward 1.04-1.05x as fast in L2 and 1.03-1.04x
// at [2048, 256] (bench_kernels, medians of 3 runs alternated, 2026-11-27), and it is exact.
// R and S are divided by S's leading coefficient, so that S's first Horner step is s + c, an
// addition: one instruction fewer on the FMA pipes, which bound the backward. 1.025-1.036x
// as fast in L2 and 1.01-1.04x at d 256 and 1024 on 1 and 2 threads (bench_kernels, medians
// of 5 runs alternated, 2026-11-28, /tmp/s17/gb-*); largest absolute error 2.70e-7 against
// 2.48e-7 on a grid of [-10, 10] in steps of 5e-5 (the tests hold it to 4e-7).
template <std::size_t N>
constexpr std::array<float, N> divided_by(const float (&c)[N], double d) {
  std::array<float, N> out{};
  for (std::size_t i = 0; i < N; ++i) out[i] = static_cast<float>(static_cast<double>(c[i]) / d);
  return out;
}
inline constexpr auto kDerivRScaled = divided_by(kDerivR, kDerivS[0]);
inline constexpr auto kDerivSScaled = divided_by(kDerivS, kDerivS[0]);

[[gnu::always_inline]] inline __m512 gelu_derivative16(__m512 x) {
  // max and min return their second operand for NaN, so NaN passes through.
  const __m512 c = _mm512_maskz_min_ps(kAll, _mm512_set1_ps(kDerivClamp),
                                       _mm512_maskz_max_ps(kAll, _mm512_set1_ps(-kDerivClamp), x));
  const __m512 s = _mm512_mul_ps(c, c);
  __m512 r = _mm512_set1_ps(kDerivRScaled[0]);
#pragma GCC unroll 8
  for (std::size_t i = 1; i < kDerivRScaled.size(); ++i) {
    r = _mm512_fmadd_ps(r, s, _mm512_set1_ps(kDerivRScaled[i]));
  }
  __m512 q = _mm512_add_ps(s, _mm512_set1_ps(kDerivSScaled[1]));
#pragma GCC unroll 8
  for (std::size_t i = 2; i < kDerivSScaled.size(); ++i) {
    q = _mm512_fmadd_ps(q, s, _mm512_set1_ps(kDerivSScaled[i]));
  }
  return _mm512_add_ps(_mm512_div_ps(_mm512_mul_ps(c, r), q), _mm512_set1_ps(0.5f));
}

// out[begin, end) = f(in) or f(g, in), whole vectors and a masked tail. Normal stores even
// for large tensors: streaming ones, which the AVX2 loops use there, made the Zen 5's
// forward at [2048, 2048] and [2048, 4096] on two threads 0.78-0.81x as fast and its
// backward at [2048, 4096] 0.56x (bench_kernels, medians of 3 runs alternated, 2026-11-27).
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

}  // namespace spw::ops::gelu_detail

#endif
