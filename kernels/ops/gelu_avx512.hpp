// GELU forward and backward on AVX-512 (16 lanes). The forward's far left tail (x < -5.5)
// takes the tables of gelu_scalar.hpp (log2 Q on 16 intervals, each coefficient a 16-entry
// vpermps, and 2^L); the rest of the forward and the whole backward take polynomials on 32
// intervals (gelu_tables_avx512.hpp), each coefficient one vpermt2ps. activation.cpp runs them
// where the build machine has AVX-512 F and DQ (DQ for vrangeps and vreduceps, which every
// AVX-512 CPU but Xeon Phi has).
#pragma once

#if defined(__AVX512F__) && defined(__AVX512DQ__)
#include "kernels/ops/gelu_scalar.hpp"
#include "kernels/ops/gelu_tables_avx512.hpp"

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <iterator>

namespace spw::ops::gelu_detail {

// Cost of the tail path, when it was the whole forward: 27 instructions per 16 elements, 10
// of them on Zen 4's FMA pipes and 7 vpermps (5 coefficients, the interval's middle and L's
// integer part), measured at 20 cycles per 16 elements with the data in L1 (3.7 GHz, two
// vectors interleaved): 2.9 G elements/s per core, 23 GB/s of x read and y written. Without
// the vpermps the same code ran at 16 cycles.
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

[[gnu::always_inline]] inline __m512 interval_poly16(const __m512 (&c)[5], __m512i index,
                                                     __m512 u) {
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

// gelu16 for lanes with x >= -kFastMaxT: Q(t) itself on 32 intervals of g = t (t + 3)
// (gelu_tables_avx512.hpp), so no logarithm and no 2^L; each coefficient one vpermt2ps,
// which reads 32 entries from two registers. Relative error 3.5e-6 at most against 5.0e-6
// for the one polynomial of degree 10 for L and its 2^L by Estrin's scheme (the AVX2 path,
// which this replaced here): 16 instructions a vector against 28. In bench_kernels on the
// Zen 5 the forward ran 1.42-1.49x as fast wherever its arithmetic bounds it (in L2 63
// against 43 GB/s; medians of 3 runs alternated, 2026-11-28), and taking |x| clamped in one
// vrangeps and g's fraction in one vreduceps (AVX512DQ), two instructions fewer, another
// 1.09-1.10x (a loop over map16 in L1, same bits).
// At t > kFastMaxT, which only x > kFastMaxT reaches here, tc Q(tc) is 1e-7 and x - 1e-7
// rounds to x within 2e-8 relative.
struct Table32 {
  __m512 low[5], high[5];
};

// Loaded into registers by each thread. The empty asm keeps them there: GCC otherwise folds
// the constant loads into every vpermt2ps, 10 more loads a vector, which ran at 53 against 65
// GB/s in that loop.
[[gnu::always_inline]] inline Table32 load_table32(const float (&rows)[5][32]) {
  Table32 table{};
  for (int j = 0; j < 5; ++j) {
    table.low[j] = _mm512_load_ps(rows[j]);
    table.high[j] = _mm512_load_ps(rows[j] + 16);
    asm("" : "+v"(table.low[j]), "+v"(table.high[j]));
  }
  return table;
}

// sum_j table[j][index] u^j, each coefficient one vpermt2ps (the index's low 5 bits).
[[gnu::always_inline]] inline __m512 interval_poly32(const Table32& table, __m512i index,
                                                     __m512 u) {
  const auto c = [&table, index](int j) {
    return _mm512_permutex2var_ps(table.low[j], index, table.high[j]);
  };
  __m512 p = _mm512_fmadd_ps(c(4), u, c(3));
  p = _mm512_fmadd_ps(p, u, c(2));
  p = _mm512_fmadd_ps(p, u, c(1));
  return _mm512_fmadd_ps(p, u, c(0));
}

// One vrangeps: the smaller magnitude of x and the limit, sign cleared (imm 0b10'10). For NaN
// it returns the limit: callers must send NaN lanes another way.
[[gnu::always_inline]] inline __m512 magnitude_clamped(__m512 x, float limit) {
  constexpr int kSmallerMagnitudePositive = 0b1010;
  return _mm512_maskz_range_ps(kAll, x, _mm512_set1_ps(limit), kSmallerMagnitudePositive);
}

[[gnu::always_inline]] inline __m512 gelu16_fast(__m512 x, const Table32& quad) {
  using namespace gelu_tables_avx512;
  // NaN lanes take the tables (gelu16_any), whatever this makes of them.
  const __m512 tc = magnitude_clamped(x, kFastMaxT);
  const __m512 g = _mm512_mul_ps(
      tc, _mm512_fmadd_ps(tc, _mm512_set1_ps(kQuadScale), _mm512_set1_ps(kQuadShiftScale)));
  // g >= 0: vreduceps gives g - floor(g) exactly and truncation is the floor.
  const __m512 u = _mm512_maskz_reduce_ps(kAll, g, _MM_FROUND_TO_NEG_INF);
  const __m512i index = _mm512_maskz_cvttps_epi32(kAll, g);
  const __m512 q = interval_poly32(quad, index, u);
  return _mm512_fnmadd_ps(tc, q, _mm512_maskz_max_ps(kAll, _mm512_setzero_ps(), x));
}

// Lanes below -kFastMaxT, and NaN, take the tables, and only a vector holding one computes
// both. A lane's path depends on its own value alone, never its neighbours', so results do
// not change with how values fall into vectors.
[[gnu::always_inline]] inline __m512 gelu16_any(__m512 x, const Tables16& tables,
                                                const Table32& quad) {
  const __mmask16 tail =
      _mm512_cmp_ps_mask(x, _mm512_set1_ps(-gelu_tables_avx512::kFastMaxT), _CMP_NGE_UQ);
  const __m512 y = gelu16_fast(x, quad);
  return tail == 0 ? y : _mm512_mask_blend_ps(tail, y, gelu16(x, tables));
}

// GELU'(x) = 1 + D(t) for x >= 0 and -D(t) below, t = |x| clamped to kDerivMaxT, D from 32
// intervals of t (gelu_tables_avx512.hpp). The sign comes from x's sign bit for both parts, so
// -0 gives 0.5 as +0 does. This replaced the rational fit of gelu_scalar.hpp with its vdivps
// (which the AVX2 path keeps): largest absolute error 8.9e-8 against 2.7e-7 on [-10, 10] in
// steps of 5e-6; in a loop over map16 in L1, one core of the Zen 5, 1.37-1.43x as fast (107
// against 78 GB/s, 2026-11-28); bench_kernels' in-cache gelu_bwd on the Xeon (Emerald Rapids)
// 1.31-1.34x (52 against 39 GB/s, medians of 3 runs alternated, 2026-11-29).
[[gnu::always_inline]] inline __m512 gelu_derivative16(__m512 x, const Table32& deriv) {
  using namespace gelu_tables_avx512;
  // min returns its second operand, |x|, for NaN, which then stays NaN to the end (vrangeps,
  // as in the forward, would return the limit).
  const __m512 tc = _mm512_maskz_min_ps(kAll, _mm512_set1_ps(kDerivMaxT), _mm512_abs_ps(x));
  const __m512 g = _mm512_mul_ps(tc, _mm512_set1_ps(kDerivScale));
  const __m512 u = _mm512_maskz_reduce_ps(kAll, g, _MM_FROUND_TO_NEG_INF);
  const __m512i index = _mm512_maskz_cvttps_epi32(kAll, g);
  const __m512i d = _mm512_castps_si512(interval_poly32(deriv, index, u));
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  const __m512i xi = _mm512_castps_si512(x);
  // d ^ (x & sign): 0x78 is ternary logic's truth table of A ^ (B & C).
  const __m512 signed_d = _mm512_castsi512_ps(_mm512_ternarylogic_epi32(d, xi, sign, 0x78));
  const __mmask16 non_negative = _mm512_testn_epi32_mask(xi, sign);
  return _mm512_mask_add_ps(signed_d, non_negative, signed_d, _mm512_set1_ps(1.0f));
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

// The forward over out[begin, end): gelu16_any two vectors at a time with one test of both
// tail masks (kortest reads two), because the fast path keeps both vector ports busy and the
// test takes a slot there. On the Xeon (Emerald Rapids, 3 GHz), where vrangeps, vreduceps
// and vcvttps2dq issue on both ports and vpermt2ps on one, the fast path alone ran at 8.3
// cycles a vector in registers, the loop with one test a vector at 9.4-9.7 in L1. Testing
// pairs, bench_kernels (medians of 3 runs alternated, 2026-11-29): in cache 1.02x; [2048,
// 256] on two threads 65-68 -> 70-72% of memcpy; elsewhere within the runs' noise.
[[gnu::always_inline]] inline void gelu_forward16(const float* in, float* out,
                                                  std::int64_t begin, std::int64_t end,
                                                  const Tables16& tables, const Table32& quad) {
  const __m512 tail_below = _mm512_set1_ps(-gelu_tables_avx512::kFastMaxT);
  std::int64_t i = begin;
  for (; i + 32 <= end; i += 32) {
    const __m512 x0 = _mm512_loadu_ps(in + i);
    const __m512 x1 = _mm512_loadu_ps(in + i + 16);
    const __mmask16 tail0 = _mm512_cmp_ps_mask(x0, tail_below, _CMP_NGE_UQ);
    const __mmask16 tail1 = _mm512_cmp_ps_mask(x1, tail_below, _CMP_NGE_UQ);
    __m512 y0 = gelu16_fast(x0, quad);
    __m512 y1 = gelu16_fast(x1, quad);
    if (!_kortestz_mask16_u8(tail0, tail1)) [[unlikely]] {
      y0 = _mm512_mask_blend_ps(tail0, y0, gelu16(x0, tables));
      y1 = _mm512_mask_blend_ps(tail1, y1, gelu16(x1, tables));
    }
    _mm512_storeu_ps(out + i, y0);
    _mm512_storeu_ps(out + i + 16, y1);
  }
  map16(in, nullptr, out, i, end,
        [&tables, &quad](__m512, __m512 v) { return gelu16_any(v, tables, quad); });
}

}  // namespace spw::ops::gelu_detail

#endif
