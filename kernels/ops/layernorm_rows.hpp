// LayerNorm rows on AVX-512 for widths that are a multiple of 16 (the input gradient up to
// 512): a row is read into registers (or L1) once and every pass of the statistics and the
// output works from there, the sums split over several accumulators, two rows at a time in
// the forward; the weight gradient keeps column blocks of its sums in registers. The
// generic loops (layernorm.cpp) read the row three times and reduce through one accumulator
// each; at d = 256, where a row is 16 vectors, each row then waits on dependent chains of 16
// additions and their horizontal sums, and the forward ran at 43% of memcpy's bandwidth with
// the tensors in cache. The formulas are the generic loops' except where a comment says so;
// the order of the additions differs.
#pragma once

#if defined(__AVX512F__)
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <utility>

namespace spw::ops::layernorm_detail {

inline constexpr std::int64_t kMaxRegisterWidth = 512;

inline bool fits_registers(std::int64_t d) { return d % 16 == 0 && d <= kMaxRegisterWidth; }

// Zero-masking extracts with a full mask are the plain ones; the plain intrinsics (and the
// 512-to-256 cast, built on them) start from _mm256_undefined_pd, which GCC 12 reports as
// uninitialized.
inline __m256 half256(__m512 v, int which) {
  return _mm256_castpd_ps(which == 0 ? _mm512_maskz_extractf64x4_pd(0xFF, _mm512_castps_pd(v), 0)
                                     : _mm512_maskz_extractf64x4_pd(0xFF, _mm512_castps_pd(v), 1));
}

inline float horizontal_sum(__m512 v) {
  const __m256 lo = half256(v, 0);
  const __m256 hi = half256(v, 1);
  const __m256 a = _mm256_add_ps(lo, hi);
  __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  b = _mm_add_ps(b, _mm_movehl_ps(b, b));
  b = _mm_add_ss(b, _mm_movehdup_ps(b));
  return _mm_cvtss_f32(b);
}

inline float sum4(const __m512 (&acc)[4]) {
  return horizontal_sum(
      _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}

struct RowStats {
  float mean, rstd;
};

// Σc and Σc² of c = x - shift over a row of nv vectors, each over two accumulators, in the
// order forward_rows adds them too.
inline void shifted_sums(const float* x, int nv, float shift, float& sum_c, float& sum_cc) {
  const __m512 k = _mm512_set1_ps(shift);
  __m512 dev[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  __m512 sq[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  for (int j = 0; j < nv; ++j) {
    const __m512 c = _mm512_sub_ps(_mm512_loadu_ps(x + 16 * j), k);
    dev[j % 2] = _mm512_add_ps(dev[j % 2], c);
    sq[j % 2] = _mm512_fmadd_ps(c, c, sq[j % 2]);
  }
  sum_c = horizontal_sum(_mm512_add_ps(dev[0], dev[1]));
  sum_cc = horizontal_sum(_mm512_add_ps(sq[0], sq[1]));
}

// Two rows of the forward, y = (x - mean) rstd gamma + beta, at once: the dependent chains of
// two rows (sums, horizontal sums, square root) overlap, and each gamma and beta vector
// loaded serves both. An odd last row is passed as both rows (same results, written twice).
// The rows are read from L1 in each pass. NV is the width in vectors, or 0 for d / 16 at run
// time (widths past 512, where unrolling every pass would only bloat the code).
//
// The statistics come from one pass of deviations from the row's first element, corrected as
// in the two-pass algorithm (Chan, Golub & LeVeque): var = (Σc² - (Σc)²/d) / d with
// c = x - x[0], mean = x[0] + Σc/d. That is exact for any shift; its rounding error grows
// with (mean - shift)² / var, which is why the generic loops first compute a rough mean to
// shift by. The first element costs no pass, and each row's chain is a pass and a
// horizontal sum shorter (at d = 256 in L1 on the Zen 4 VM: 119 instead of 145 cycles a row,
// one row at a time; two rows at a time measure 124 in L1 but took 10% off in place, 46 ->
// 42 us per call at 2048 x 256 on 2 threads, where the rows come from L2). A row whose first
// element lies more than about 4 standard deviations from its mean (Σc² > 16 d var) takes a
// second pass shifted by the mean so found, so the error never grows by more than that
// factor 16.
template <int NV>
inline void forward_rows(const float* x0, const float* x1, const float* gamma,
                         const float* beta, std::int64_t d, float inv_d, float eps, float* y0,
                         float* y1, RowStats* stats) {
  const int nv = NV > 0 ? NV : static_cast<int>(d / 16);
  const float* xs[2] = {x0, x1};
  float shift[2] = {x0[0], x1[0]};
  float sum_c[2], sum_cc[2];
  {
    const __m512 k0 = _mm512_set1_ps(shift[0]);
    const __m512 k1 = _mm512_set1_ps(shift[1]);
    __m512 dev0[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    __m512 dev1[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    __m512 sq0[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    __m512 sq1[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
#pragma GCC unroll 32
    for (int k = 0; k < nv; ++k) {
      const __m512 c0 = _mm512_sub_ps(_mm512_loadu_ps(x0 + 16 * k), k0);
      const __m512 c1 = _mm512_sub_ps(_mm512_loadu_ps(x1 + 16 * k), k1);
      dev0[k % 2] = _mm512_add_ps(dev0[k % 2], c0);
      dev1[k % 2] = _mm512_add_ps(dev1[k % 2], c1);
      sq0[k % 2] = _mm512_fmadd_ps(c0, c0, sq0[k % 2]);
      sq1[k % 2] = _mm512_fmadd_ps(c1, c1, sq1[k % 2]);
    }
    sum_c[0] = horizontal_sum(_mm512_add_ps(dev0[0], dev0[1]));
    sum_c[1] = horizontal_sum(_mm512_add_ps(dev1[0], dev1[1]));
    sum_cc[0] = horizontal_sum(_mm512_add_ps(sq0[0], sq0[1]));
    sum_cc[1] = horizontal_sum(_mm512_add_ps(sq1[0], sq1[1]));
  }
  for (int r = 0; r < 2; ++r) {
    float spread = sum_cc[r] - sum_c[r] * sum_c[r] * inv_d;  // d var
    if (!(sum_cc[r] <= 16.0f * spread)) {
      shift[r] += sum_c[r] * inv_d;
      shifted_sums(xs[r], nv, shift[r], sum_c[r], sum_cc[r]);
      spread = sum_cc[r] - sum_c[r] * sum_c[r] * inv_d;
    }
    const float var = std::max(spread * inv_d, 0.0f);
    stats[r] = {shift[r] + sum_c[r] * inv_d, 1.0f / std::sqrt(var + eps)};
  }
  const __m512 m0 = _mm512_set1_ps(stats[0].mean), rs0 = _mm512_set1_ps(stats[0].rstd);
  const __m512 m1 = _mm512_set1_ps(stats[1].mean), rs1 = _mm512_set1_ps(stats[1].rstd);
#pragma GCC unroll 32
  for (int k = 0; k < nv; ++k) {
    const __m512 gv = _mm512_loadu_ps(gamma + 16 * k);
    const __m512 bv = _mm512_loadu_ps(beta + 16 * k);
    // Both rows read before either is written: in place, an odd row is both.
    const __m512 h0 = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x0 + 16 * k), m0), rs0);
    const __m512 h1 = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x1 + 16 * k), m1), rs1);
    _mm512_storeu_ps(y0 + 16 * k, _mm512_fmadd_ps(h0, gv, bv));
    _mm512_storeu_ps(y1 + 16 * k, _mm512_fmadd_ps(h1, gv, bv));
  }
}

// One row of the input gradient: dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy gamma.
template <int NV>
inline void backward_input_row(const float* dy, const float* x, const float* gamma, float m,
                               float rs, float inv_d, float* dx) {
  __m512 g[NV], xhat[NV];
  __m512 sum_g[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
  __m512 sum_gx[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                      _mm512_setzero_ps()};
  const __m512 mv = _mm512_set1_ps(m);
  const __m512 rv = _mm512_set1_ps(rs);
#pragma GCC unroll 32
  for (int k = 0; k < NV; ++k) {
    g[k] = _mm512_mul_ps(_mm512_loadu_ps(dy + 16 * k), _mm512_loadu_ps(gamma + 16 * k));
    xhat[k] = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + 16 * k), mv), rv);
    sum_g[k % 4] = _mm512_add_ps(sum_g[k % 4], g[k]);
    sum_gx[k % 4] = _mm512_fmadd_ps(g[k], xhat[k], sum_gx[k % 4]);
  }
  const __m512 mean_g = _mm512_set1_ps(sum4(sum_g) * inv_d);
  const __m512 mean_gx = _mm512_set1_ps(sum4(sum_gx) * inv_d);
#pragma GCC unroll 32
  for (int k = 0; k < NV; ++k) {
    const __m512 centred = _mm512_fnmadd_ps(xhat[k], mean_gx, _mm512_sub_ps(g[k], mean_g));
    _mm512_storeu_ps(dx + 16 * k, _mm512_mul_ps(rv, centred));
  }
}

// Adds rows [begin, end) of dy ⊙ xhat and dy into the partials pg and pb, for NB vectors of
// columns starting at c0: the sums stay in registers over all the rows, instead of going
// through memory once per row.
template <int NB>
inline void weight_columns(const float* dy, const float* x, const float* mean, const float* rstd,
                           std::int64_t d, std::int64_t begin, std::int64_t end, std::int64_t c0,
                           float* pg, float* pb) {
  __m512 acc_g[NB], acc_b[NB];
#pragma GCC unroll 8
  for (int k = 0; k < NB; ++k) {
    acc_g[k] = _mm512_setzero_ps();
    acc_b[k] = _mm512_setzero_ps();
  }
  for (std::int64_t i = begin; i < end; ++i) {
    const __m512 mv = _mm512_set1_ps(mean[i]);
    const __m512 rv = _mm512_set1_ps(rstd[i]);
    const float* dyr = dy + i * d + c0;
    const float* xr = x + i * d + c0;
#pragma GCC unroll 8
    for (int k = 0; k < NB; ++k) {
      const __m512 dyv = _mm512_loadu_ps(dyr + 16 * k);
      const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(xr + 16 * k), mv), rv);
      acc_g[k] = _mm512_fmadd_ps(dyv, xhat, acc_g[k]);
      acc_b[k] = _mm512_add_ps(acc_b[k], dyv);
    }
  }
#pragma GCC unroll 8
  for (int k = 0; k < NB; ++k) {
    _mm512_storeu_ps(pg + c0 + 16 * k, acc_g[k]);
    _mm512_storeu_ps(pb + c0 + 16 * k, acc_b[k]);
  }
}

// The weight-gradient partials of rows [begin, end) for a width that is a multiple of 16
// (any size): 8 vectors of columns at a time, then the rest.
inline void weight_rows(const float* dy, const float* x, const float* mean, const float* rstd,
                        std::int64_t d, std::int64_t begin, std::int64_t end, float* pg,
                        float* pb) {
  constexpr int kBlock = 8;
  std::int64_t c0 = 0;
  for (; c0 + 16 * kBlock <= d; c0 += 16 * kBlock) {
    weight_columns<kBlock>(dy, x, mean, rstd, d, begin, end, c0, pg, pb);
  }
  using Fn = void (*)(const float*, const float*, const float*, const float*, std::int64_t,
                      std::int64_t, std::int64_t, std::int64_t, float*, float*);
  static constexpr Fn kRest[kBlock] = {nullptr,          &weight_columns<1>, &weight_columns<2>,
                                       &weight_columns<3>, &weight_columns<4>, &weight_columns<5>,
                                       &weight_columns<6>, &weight_columns<7>};
  const auto rest = static_cast<int>((d - c0) / 16);
  if (rest > 0) kRest[rest](dy, x, mean, rstd, d, begin, end, c0, pg, pb);
}

// Row kernels for widths 16, 32, ..., 512, indexed by d / 16 - 1; the forward also takes any
// wider multiple of 16 (forward_rows<0>).
using ForwardRows = void (*)(const float*, const float*, const float*, const float*,
                             std::int64_t, float, float, float*, float*, RowStats*);
using BackwardInputRow = void (*)(const float*, const float*, const float*, float, float, float,
                                  float*);

template <std::size_t... I>
constexpr std::array<ForwardRows, sizeof...(I)> forward_rows_table(std::index_sequence<I...>) {
  return {&forward_rows<static_cast<int>(I) + 1>...};
}
template <std::size_t... I>
constexpr std::array<BackwardInputRow, sizeof...(I)> backward_input_rows(
    std::index_sequence<I...>) {
  return {&backward_input_row<static_cast<int>(I) + 1>...};
}

inline ForwardRows forward_rows_for(std::int64_t d) {
  static constexpr auto kRows =
      forward_rows_table(std::make_index_sequence<kMaxRegisterWidth / 16>());
  return d <= kMaxRegisterWidth ? kRows[static_cast<std::size_t>(d / 16 - 1)]
                                : &forward_rows<0>;
}

inline BackwardInputRow backward_input_row_for(std::int64_t d) {
  static constexpr auto kRows =
      backward_input_rows(std::make_index_sequence<kMaxRegisterWidth / 16>());
  return kRows[static_cast<std::size_t>(d / 16 - 1)];
}

}  // namespace spw::ops::layernorm_detail

#endif
