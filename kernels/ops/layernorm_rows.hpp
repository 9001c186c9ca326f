// LayerNorm rows on AVX-512 for widths that are a multiple of 16 (the input gradient up to
// 256, kMaxRegisterWidth): a row is read into registers (or L1) once and every pass of the
// statistics and the output works from there, the sums split over several accumulators, four
// rows at a time in the forward (software-pipelined; rows under 2 KiB, layernorm.cpp); the
// weight gradient keeps column blocks of its sums in registers, or for rows of 4 KiB and more
// takes four rows at a time across all columns. The
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

// GCC 12 warns falsely that the intrinsics' undefined pass-through operands may be used
// uninitialized (GCC bug 105593, fixed in 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// At d 512 the generic loops (layernorm.cpp) ran the input gradient faster than a row held in
// registers, with its operands in L3: 1.12x on one thread and 1.02x on two at [2048, 512]
// (96.8 against 86.3 GB/s, 77% against 68% of memcpy; bench_kernels, medians of 5 runs
// alternated, 2026-11-28, /tmp/s17/bj-*), though 0.71x with them in L2. Prefetching the next
// row for the register kernel instead made it 0.91-0.99x as fast (/tmp/s17/bk-*).
inline constexpr std::int64_t kMaxRegisterWidth = 256;

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

// The forward, y = (x - mean) rstd gamma + beta, four rows at a time and software-pipelined:
// one loop over the columns writes the outputs of a block of four rows and, in the same
// iterations, sums the statistics of the next block. A row's statistics end in a dependent
// chain (its sums, their horizontal sums, a square root and a division) that the output of
// the same row must wait for; two rows at a time (the kernel before this one) the core sat
// idle for much of that chain. Here the chain of one block runs while the next block's loads
// and sums are independent work, the eight horizontal sums of a block (Σc and Σc² of four
// rows) are added in one transposing tree of 23 instructions instead of 8 separate
// reductions, and the square root and division run once for four rows. At 2048 x 256 on one
// thread (x and y in L3) that took the forward from about 56% to about 65% of memcpy's
// bandwidth, measured in one process with the old kernel alternated.
//
// The statistics come from one pass of deviations from the row's first element, corrected as
// in the two-pass algorithm (Chan, Golub & LeVeque): var = (Σc² - (Σc)²/d) / d with
// c = x - x[0], mean = x[0] + Σc/d. That is exact for any shift; its rounding error grows
// with (mean - shift)² / var, which is why the generic loops first compute a rough mean to
// shift by. The first element costs no pass. A row whose first element lies more than about
// 4 standard deviations from its mean (Σc² > 16 d var) takes a second pass shifted by the
// mean so found, so the error never grows by more than that factor 16.
//
// Every row goes through the same operations in the same order wherever it stands in a
// block, so results do not depend on the row count or the thread count. A block past the
// last row repeats the last row (same results, written again).
//
// Tried and dropped (same process, alternated, 1 thread, data in L3): writing the outputs
// row by row instead of the four rows a vector at a time in turn, in the same loop as the
// next block's sums (fewer store streams, but twice the gamma and beta loads and more loop
// overhead: 10-60% slower), or in a loop of its own with the sums of the block after next in
// another (13-32% slower); summing the block two ahead instead of the next one (1-12%
// slower); software prefetch of the block after next (d 512 9% slower, d 256 no change);
// the column loop unrolled twice (within 2%).

// Σc and Σc² of c = x - shift over a row of nv vectors, each over two accumulators: the
// second pass of a row whose first element is an outlier.
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

inline constexpr int kBlockRows = 4;

// The rows of a block (a block past the tensor's last row repeats it) and the index of its
// first row.
struct Block {
  const float* x[kBlockRows];
  float* y[kBlockRows];
  std::int64_t first;
};

// The running sums of a block's statistics: per row the shift (its first element), and
// -Σc and Σc² over 16 lanes.
struct BlockSums {
  __m512 shift[kBlockRows], dev[kBlockRows], sq[kBlockRows];

  explicit BlockSums(const Block& b) {
#pragma GCC unroll 4
    for (int r = 0; r < kBlockRows; ++r) {
      shift[r] = _mm512_set1_ps(b.x[r][0]);
      dev[r] = _mm512_setzero_ps();
      sq[r] = _mm512_setzero_ps();
    }
  }

  // Adds column k of every row of b.
  void add(const Block& b, int k) {
#pragma GCC unroll 4
    for (int r = 0; r < kBlockRows; ++r) {
      // shift - x, not x - shift: the load folds into the subtraction (the sum is negated
      // back in finish_block, exactly). Fewer instructions in the loop measured 10-13% faster
      // with the rows in L2.
      const __m512 c = _mm512_sub_ps(shift[r], _mm512_loadu_ps(b.x[r] + 16 * k));
      dev[r] = _mm512_add_ps(dev[r], c);
      sq[r] = _mm512_fmadd_ps(c, c, sq[r]);
    }
  }
};

// The 16 lanes of a and of b halved: 128-bit chunks [a0+a2, a1+a3, b0+b2, b1+b3].
inline __m512 fold_pair(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
}

// -Σc and Σc² of each row of the block, in lanes 0-3 and 4-7 of the result: a transposing
// tree that adds every row's 16 lanes in the same order.
inline __m256 block_totals(const BlockSums& s) {
  // Chunk r of each: row r's four partial sums of 4 lanes.
  const __m512 p01 = fold_pair(s.dev[0], s.dev[1]);
  const __m512 p23 = fold_pair(s.dev[2], s.dev[3]);
  const __m512 q01 = fold_pair(s.sq[0], s.sq[1]);
  const __m512 q23 = fold_pair(s.sq[2], s.sq[3]);
  const __m512 devs = _mm512_add_ps(_mm512_shuffle_f32x4(p01, p23, 0x88),
                                    _mm512_shuffle_f32x4(p01, p23, 0xDD));
  const __m512 sqs = _mm512_add_ps(_mm512_shuffle_f32x4(q01, q23, 0x88),
                                   _mm512_shuffle_f32x4(q01, q23, 0xDD));
  // Chunk r: [dev r (2 partials), sq r (2 partials)], then each total in lanes 0 and 2.
  const __m512 half = _mm512_add_ps(_mm512_shuffle_ps(devs, sqs, _MM_SHUFFLE(1, 0, 1, 0)),
                                    _mm512_shuffle_ps(devs, sqs, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 total = _mm512_add_ps(half, _mm512_permute_ps(half, _MM_SHUFFLE(2, 3, 0, 1)));
  const __m512i gather = _mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_castps512_ps256(_mm512_permutexvar_ps(gather, total));
}

// Mean and rstd of a block's four rows, lanes 0-3.
struct BlockStats {
  __m128 mean, rstd;
};

// The statistics of block b from its sums; stores the mean and rstd of its rows before `end`.
inline BlockStats finish_block(const BlockSums& s, const Block& b, int nv, float inv_d,
                               float eps, float* mean_out, float* rstd_out, std::int64_t end) {
  const __m256 totals = block_totals(s);
  __m128 sum_c = _mm_xor_ps(_mm256_castps256_ps128(totals), _mm_set1_ps(-0.0f));
  __m128 sum_cc = _mm256_extractf128_ps(totals, 1);
  __m128 shift = _mm_setr_ps(b.x[0][0], b.x[1][0], b.x[2][0], b.x[3][0]);
  const __m128 id = _mm_set1_ps(inv_d);
  __m128 spread = _mm_sub_ps(sum_cc, _mm_mul_ps(_mm_mul_ps(sum_c, sum_c), id));  // d var
  // !(Σc² <= 16 d var): NaN rows take the second pass too, as the generic loops see them.
  const __mmask8 outliers =
      _mm_cmp_ps_mask(sum_cc, _mm_mul_ps(_mm_set1_ps(16.0f), spread), _CMP_NLE_UQ);
  if (outliers != 0) {
    alignas(16) float sh[4], sc[4], scc[4];
    _mm_store_ps(sh, shift);
    _mm_store_ps(sc, sum_c);
    _mm_store_ps(scc, sum_cc);
    for (int r = 0; r < kBlockRows; ++r) {
      if ((outliers >> r) & 1) {
        sh[r] += sc[r] * inv_d;
        shifted_sums(b.x[r], nv, sh[r], sc[r], scc[r]);
      }
    }
    shift = _mm_load_ps(sh);
    sum_c = _mm_load_ps(sc);
    sum_cc = _mm_load_ps(scc);
    spread = _mm_sub_ps(sum_cc, _mm_mul_ps(_mm_mul_ps(sum_c, sum_c), id));
  }
  const __m128 var = _mm_max_ps(_mm_mul_ps(spread, id), _mm_setzero_ps());
  const BlockStats st{
      _mm_add_ps(shift, _mm_mul_ps(sum_c, id)),
      _mm_div_ps(_mm_set1_ps(1.0f), _mm_sqrt_ps(_mm_add_ps(var, _mm_set1_ps(eps))))};
  const std::int64_t n = std::min<std::int64_t>(kBlockRows, end - b.first);
  const auto mask = static_cast<__mmask8>((1u << n) - 1);
  _mm_mask_storeu_ps(mean_out + b.first, mask, st.mean);
  _mm_mask_storeu_ps(rstd_out + b.first, mask, st.rstd);
  return st;
}

inline __m512 broadcast_lane(__m128 v, int r) {
  return _mm512_permutexvar_ps(_mm512_set1_epi32(r), _mm512_castps128_ps512(v));
}

// The statistics pass reads column k + nv/2 (wrapped) while the output pass writes column k,
// here and in sum_block alike (so every row is summed in the same order). A load of the next
// block and a store of this one then never fall on the same address modulo 4 KiB, which
// they otherwise do at d 256 (blocks of 4 KiB) and d 1024 (rows of 4 KiB), x and y being
// page-aligned: such a load waits for the store it seems to alias. At d 1024 with the rows
// in L2, 300 ns a row without the offset, 150 with it.
inline int stats_offset(int nv) { return nv / 2; }

// Four rows of stores at once, each line missing L1, leave an Intel core waiting for the
// lines' ownership (a read of each before it can be written); asking for them a block ahead
// with PREFETCHW overlaps those reads with the current block's work. On the Xeon (Emerald
// Rapids) that made the forward 1.10-1.12x as fast at [2048, d], d 256 / 512 / 1024, on 1 and
// 2 threads (d 256 on 2 threads 76.9 -> 85.9 GB/s, 77% -> 86% of memcpy; the AVX2 kernel,
// which runs d 512 and 1024 here, does the same) and 1.02-1.23x in L2 (bench_kernels,
// medians of 3 runs alternated, 2026-11-29, /tmp/s22/lnw-*); prefetching the next block's
// inputs too, or the outputs two blocks ahead, gained less (/tmp/s22/lnq-*). On the Zen 4 it
// costs more than it hides, so the caller chooses (write_prefetch.hpp).
inline void prefetch_for_write(const float* line) { __builtin_prefetch(line, 1, 3); }

// Writes the outputs of block `out` (statistics st) and, if `next` is not null, sums the
// statistics of that block into `sums` in the same column loop.
template <bool PrefetchOutputs>
inline void output_block(const Block& out, const BlockStats& st, const float* gamma,
                         const float* beta, int nv, const Block* next, BlockSums* sums) {
  __m512 m[kBlockRows], rs[kBlockRows];
#pragma GCC unroll 4
  for (int r = 0; r < kBlockRows; ++r) {
    m[r] = broadcast_lane(st.mean, r);
    rs[r] = broadcast_lane(st.rstd, r);
  }
  auto column = [&](int k) {
    // The next block's outputs, a line of each row, asked for with intent to write (see
    // prefetch_for_write).
    if (PrefetchOutputs && next != nullptr) {
#pragma GCC unroll 4
      for (int r = 0; r < kBlockRows; ++r) prefetch_for_write(next->y[r] + 16 * k);
    }
    const __m512 gv = _mm512_loadu_ps(gamma + 16 * k);
    const __m512 bv = _mm512_loadu_ps(beta + 16 * k);
    __m512 h[kBlockRows];
    // All rows read before any is written: in place, a repeated last row is several rows.
#pragma GCC unroll 4
    for (int r = 0; r < kBlockRows; ++r) {
      // -(x - mean) rstd, so that the load of x folds into the subtraction; y is the same
      // to the bit.
      h[r] = _mm512_mul_ps(_mm512_sub_ps(m[r], _mm512_loadu_ps(out.x[r] + 16 * k)), rs[r]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < kBlockRows; ++r) {
      _mm512_storeu_ps(out.y[r] + 16 * k, _mm512_fnmadd_ps(h[r], gv, bv));
    }
  };
  if (next == nullptr) {
    for (int k = 0; k < nv; ++k) column(k);
    return;
  }
  const int half = stats_offset(nv);
  for (int k = 0; k < nv - half; ++k) {
    column(k);
    sums->add(*next, k + half);
  }
  for (int k = nv - half; k < nv; ++k) {
    column(k);
    sums->add(*next, k - (nv - half));
  }
}

// Sums block b on its own (the first block of a range) and finishes its statistics.
inline BlockStats sum_block(const Block& b, int nv, float inv_d, float eps, float* mean,
                            float* rstd, std::int64_t end) {
  BlockSums sums(b);
  const int half = stats_offset(nv);
  for (int k = half; k < nv; ++k) sums.add(b, k);
  for (int k = 0; k < half; ++k) sums.add(b, k);
  return finish_block(sums, b, nv, inv_d, eps, mean, rstd, end);
}

// Rows [begin, end) of the forward (end > begin), in blocks of four from `begin`; `last` is
// the index of the tensor's last row, which fills a block that runs past it.
template <bool PrefetchOutputs>
inline void forward_rows(const float* x, const float* gamma, const float* beta, std::int64_t d,
                         std::int64_t begin, std::int64_t end, std::int64_t last, float inv_d,
                         float eps, float* y, float* mean, float* rstd) {
  const int nv = static_cast<int>(d / 16);
  auto block = [&](std::int64_t first) {
    Block b;
    b.first = first;
    for (int r = 0; r < kBlockRows; ++r) {
      const std::int64_t i = std::min(first + r, last);
      b.x[r] = x + i * d;
      b.y[r] = y + i * d;
    }
    return b;
  };
  Block cur = block(begin);
  BlockStats st = sum_block(cur, nv, inv_d, eps, mean, rstd, end);
  for (std::int64_t i0 = begin; i0 < end; i0 += kBlockRows) {
    if (i0 + kBlockRows < end) {
      const Block next = block(i0 + kBlockRows);
      BlockSums sums(next);
      output_block<PrefetchOutputs>(cur, st, gamma, beta, nv, &next, &sums);
      st = finish_block(sums, next, nv, inv_d, eps, mean, rstd, end);
      cur = next;
    } else {
      output_block<PrefetchOutputs>(cur, st, gamma, beta, nv, nullptr, nullptr);
    }
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

// Sums rows [begin, end) of dy ⊙ xhat and dy into the partials pg and pb, for NB vectors of
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

// Adds rows [i, i + R) of dy ⊙ xhat and dy into the partials pg and pb (or, if `first`,
// starts them) across all columns, row by row in order for each column (the same additions,
// in the same order, as weight_columns), the partials going through L1 once per R rows: each
// row is read from start to end, which the prefetchers follow where a column block's sweep,
// 4 KiB apart from row to row at d 1024, they do not.
template <int R>
inline void weight_row_group(const float* dy, const float* x, const float* mean,
                             const float* rstd, std::int64_t d, std::int64_t i, bool first,
                             float* pg, float* pb) {
  __m512 mv[R], rv[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    mv[r] = _mm512_set1_ps(mean[i + r]);
    rv[r] = _mm512_set1_ps(rstd[i + r]);
  }
  for (std::int64_t c = 0; c < d; c += 16) {
    __m512 g = first ? _mm512_setzero_ps() : _mm512_loadu_ps(pg + c);
    __m512 b = first ? _mm512_setzero_ps() : _mm512_loadu_ps(pb + c);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const float* row = x + (i + r) * d + c;
      const __m512 dyv = _mm512_loadu_ps(dy + (i + r) * d + c);
      const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(row), mv[r]), rv[r]);
      g = _mm512_fmadd_ps(dyv, xhat, g);
      b = _mm512_add_ps(b, dyv);
    }
    _mm512_storeu_ps(pg + c, g);
    _mm512_storeu_ps(pb + c, b);
  }
}

inline void weight_rows_streamed(const float* dy, const float* x, const float* mean,
                                 const float* rstd, std::int64_t d, std::int64_t begin,
                                 std::int64_t end, float* pg, float* pb) {
  std::int64_t i = begin;
  for (; i + 4 <= end; i += 4) weight_row_group<4>(dy, x, mean, rstd, d, i, i == begin, pg, pb);
  for (; i < end; ++i) weight_row_group<1>(dy, x, mean, rstd, d, i, i == begin, pg, pb);
}

// The weight-gradient partials of rows [begin, end) for a width that is a multiple of 16
// (any size): one sweep over the rows per block of 8 vectors of columns, then the rest.
inline void weight_rows(const float* dy, const float* x, const float* mean, const float* rstd,
                        std::int64_t d, std::int64_t begin, std::int64_t end, float* pg,
                        float* pb) {
  constexpr int kBlock = 8;
  using Fn = void (*)(const float*, const float*, const float*, const float*, std::int64_t,
                      std::int64_t, std::int64_t, std::int64_t, float*, float*);
  static constexpr Fn kRest[kBlock] = {nullptr,          &weight_columns<1>, &weight_columns<2>,
                                       &weight_columns<3>, &weight_columns<4>, &weight_columns<5>,
                                       &weight_columns<6>, &weight_columns<7>};
  std::int64_t c0 = 0;
  for (; c0 + 16 * kBlock <= d; c0 += 16 * kBlock) {
    weight_columns<kBlock>(dy, x, mean, rstd, d, begin, end, c0, pg, pb);
  }
  const auto rest = static_cast<int>((d - c0) / 16);
  if (rest > 0) kRest[rest](dy, x, mean, rstd, d, begin, end, c0, pg, pb);
}

// Input-gradient row kernels for widths 16, 32, ..., kMaxRegisterWidth, indexed by d / 16 - 1.
using BackwardInputRow = void (*)(const float*, const float*, const float*, float, float, float,
                                  float*);

template <std::size_t... I>
constexpr std::array<BackwardInputRow, sizeof...(I)> backward_input_rows(
    std::index_sequence<I...>) {
  return {&backward_input_row<static_cast<int>(I) + 1>...};
}

inline BackwardInputRow backward_input_row_for(std::int64_t d) {
  static constexpr auto kRows =
      backward_input_rows(std::make_index_sequence<kMaxRegisterWidth / 16>());
  return kRows[static_cast<std::size_t>(d / 16 - 1)];
}

#pragma GCC diagnostic pop

}  // namespace spw::ops::layernorm_detail

#endif
