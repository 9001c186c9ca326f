// GELU forward and backward on AVX-512 (16 lanes): the forms of gelu_scalar.hpp, each
// coefficient of the tables one 16-entry vpermps. activation.cpp runs them where the build
// machine has AVX-512 F and DQ (the Zen 4 the project started on; DQ for vrangeps and
// vreduceps, which every AVX-512 CPU but Xeon Phi has).
#pragma once

#if defined(__AVX512F__) && defined(__AVX512DQ__)
#include "kernels/ops/gelu_scalar.hpp"
#include "kernels/ops/gelu_tables_avx512.hpp"

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
struct Quad32 {
  __m512 low[5], high[5];
};

// Loaded into registers by each thread. The empty asm keeps them there: GCC otherwise folds
// the constant loads into every vpermt2ps, 10 more loads a vector, which ran at 53 against 65
// GB/s in that loop.
[[gnu::always_inline]] inline Quad32 load_quad32() {
  using gelu_tables_avx512::kQuad;
  static_assert(std::size(kQuad) == 5 && std::size(kQuad[0]) == 32,
                "gelu16_fast is written for 32 intervals of degree 4: refit or rewrite it");
  Quad32 q{};
  for (int j = 0; j < 5; ++j) {
    q.low[j] = _mm512_load_ps(kQuad[j]);
    q.high[j] = _mm512_load_ps(kQuad[j] + 16);
    asm("" : "+v"(q.low[j]), "+v"(q.high[j]));
  }
  return q;
}

[[gnu::always_inline]] inline __m512 gelu16_fast(__m512 x, const Quad32& quad) {
  using namespace gelu_tables_avx512;
  // One vrangeps: the smaller magnitude of x and kFastMaxT, sign cleared (imm 0b10'10).
  // NaN lanes take the tables (gelu16_any), whatever this makes of them.
  constexpr int kSmallerMagnitudePositive = 0b1010;
  const __m512 tc =
      _mm512_maskz_range_ps(kAll, x, _mm512_set1_ps(kFastMaxT), kSmallerMagnitudePositive);
  const __m512 g = _mm512_mul_ps(
      tc, _mm512_fmadd_ps(tc, _mm512_set1_ps(kQuadScale), _mm512_set1_ps(kQuadShiftScale)));
  // g >= 0: vreduceps gives g - floor(g) exactly and truncation is the floor.
  const __m512 u = _mm512_maskz_reduce_ps(kAll, g, _MM_FROUND_TO_NEG_INF);
  const __m512i index = _mm512_maskz_cvttps_epi32(kAll, g);
  const auto c = [&quad, index](int j) {
    return _mm512_permutex2var_ps(quad.low[j], index, quad.high[j]);
  };
  __m512 q = _mm512_fmadd_ps(c(4), u, c(3));
  q = _mm512_fmadd_ps(q, u, c(2));
  q = _mm512_fmadd_ps(q, u, c(1));
  q = _mm512_fmadd_ps(q, u, c(0));
  return _mm512_fnmadd_ps(tc, q, _mm512_maskz_max_ps(kAll, _mm512_setzero_ps(), x));
}

// Lanes below -kFastMaxT, and NaN, take the tables, and only a vector holding one computes
// both. A lane's path depends on its own value alone, never its neighbours', so results do
// not change with how values fall into vectors.
[[gnu::always_inline]] inline __m512 gelu16_any(__m512 x, const Tables16& tables,
                                                const Quad32& quad) {
  const __mmask16 tail =
      _mm512_cmp_ps_mask(x, _mm512_set1_ps(-gelu_tables_avx512::kFastMaxT), _CMP_NGE_UQ);
  const __m512 y = gelu16_fast(x, quad);
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
