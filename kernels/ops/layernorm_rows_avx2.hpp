// LayerNorm rows on AVX2 + FMA (8 floats a register, 16 registers), for any width: the CPUs
// without AVX-512 (the Zen 3 development machines), and on AVX-512 CPUs the forward of rows
// of 2 KiB and more or of a width that is no multiple of 16, two rows at a time
// (layernorm.cpp says why). The ideas of layernorm_rows.hpp, with
// the counts re-measured on the Zen 3, where they came out smaller: the forward sums the
// statistics of the next row in the loop that writes the outputs of this one, the input
// gradient likewise, and the weight gradient sweeps the columns four rows at a time. A width
// that is no multiple of 8 ends in a masked vector. The formulas are the generic loops'
// (layernorm.cpp) except where a comment says so; the order of the additions differs, and is
// the same for every row wherever it stands, so results do not depend on the row count or
// the thread count.
//
// On the Zen 3 more rows in flight cost more than they save: a loop that copies rows of
// [2048, d] (tensors in L3) while summing the rows R ahead runs at about 95% of memcpy with
// R = 1, 80% with 2 and 60-70% with 4 (d 256-1024), though each moves the same bytes. So one
// row is in flight here where AVX-512 has four. With one, the forward is bound by its own
// instructions and the chain that ends each row's statistics, not by memory: at d 256 and
// 512 it took 3.2-3.8 TSC cycles per 8 floats with its rows in L1 and 3.5-4.2 from L3, where
// memcpy took 2.3-2.6 (2026-11-27). Shortening that chain (the broadcasts in registers, the
// accumulators kept out of memory by constant indices, rsqrt with a Newton step) made it
// 1.12-1.20x faster in L1 and 1.09-1.11x from L3 (medians of 31 alternated rounds). Two rows
// with one accumulator each took 2.5-2.8 in L1 but 3.5-3.9 from L3; retried once the loads
// came before the stores (add_columns), they ran 1.08-1.18x as fast as one row in one sitting
// and 0.87-1.20x in the next (/tmp/s14/abR.cpp), so one row stays.
#pragma once

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace spw::ops::layernorm_avx2 {

// The lanes of the last, partial vector of a row of width d: lane k is all ones if
// 8 nv + k < d.
inline __m256i tail_mask(std::int64_t d) {
  const auto rest = static_cast<int>(d % 8);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(rest), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Row widths as the loops see them: nv whole vectors, then a masked one if `tail`.
struct Width {
  int nv;
  bool tail;
  __m256i mask;

  explicit Width(std::int64_t d)
      : nv(static_cast<int>(d / 8)), tail(d % 8 != 0), mask(tail_mask(d)) {}
};

inline __m256 load_tail(const float* p, __m256i mask) { return _mm256_maskload_ps(p, mask); }

// Lanes 0-3 of the result: the sums of the 8 lanes of a, b, c and e, each added in the same
// order ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)).
inline __m128 sum_lanes4(__m256 a, __m256 b, __m256 c, __m256 e) {
  const __m256 ab = _mm256_hadd_ps(a, b);  // a01 a23 b01 b23 | a45 a67 b45 b67
  const __m256 ce = _mm256_hadd_ps(c, e);
  const __m256 all = _mm256_hadd_ps(ab, ce);  // a0-3 b0-3 c0-3 e0-3 | a4-7 b4-7 c4-7 e4-7
  return _mm_add_ps(_mm256_castps256_ps128(all), _mm256_extractf128_ps(all, 1));
}

// ---------------------------------------------------------------------------------------
// Forward: y = (x - mean) rstd gamma + beta, in blocks of R rows, software-pipelined as on
// AVX-512: one loop over the columns writes the outputs of a block and sums the statistics of
// the next, so that the dependent chain at the end of a block's statistics (horizontal sums,
// square root, division) runs while the next loop's loads and sums are independent work.
//
// The statistics are one pass of deviations from the row's first element, corrected as in the
// two-pass algorithm (Chan, Golub & LeVeque): var = (Σc² - (Σc)²/d) / d with c = x - x[0],
// mean = x[0] + Σc/d; a row whose first element lies more than about 4 standard deviations
// from its mean (Σc² > 16 d var) takes a second pass shifted by the mean so found (see
// layernorm_rows.hpp).
//
// Measured on the Zen 3 (one thread, [2048, d], variants alternated with each other and
// with memcpy in one process, median CPU times, as a share of memcpy's rate at d 256 / 512
// / 1024): R = 1 with two accumulators a row 66-68 / 82-84 / 85-89%, R = 2 with two 57-68 /
// 56-67 / 77-86%, R = 2 with one 62 / 72-77 / 90-107%, R = 4 with one (the AVX-512 layout)
// 54-58 / 58-63 / 47-65%. One accumulator for one row is a chain of one FMA (4 cycles) per
// vector, which the loop then waits on. The AVX-512 kernel's offset between the columns the
// two halves of the loop touch (against 4 KiB aliasing) made it no faster here (R = 2, in
// bench_kernels: 47 / 51 / 71% with it, 62 / 56 / 72% without), so the loop reads and
// writes the same column, its loads first (add_columns). Summing the statistics two blocks
// ahead instead of one, so that the chain ending a block's statistics (horizontal sums,
// square root, division) has a whole block of independent work behind it, was no faster
// (2026-11-27, d 256: 65% of memcpy against 68%, ahead in 4 of 15 alternated rounds; d 512
// and 1024 likewise): that chain is not the bound.

// Rows in flight, and accumulators a row for each of Σc and Σc².
inline constexpr int kBlockRows = 1;
inline constexpr int kSlots = 2;

// f(std::integral_constant<int, slot>{}) for a slot in [0, A) known only at run time: every
// accumulator index is then a constant, which lets the compiler keep the accumulators in
// registers (an index it cannot see puts them all on the stack, and each block's sums then
// go through memory on the chain that ends it).
template <int A, class F>
[[gnu::always_inline]] inline void with_slot(int slot, F f) {
  [&]<int... S>(std::integer_sequence<int, S...>) {
    ((slot == S ? f(std::integral_constant<int, S>{}) : void()), ...);
  }(std::make_integer_sequence<int, A>{});
}

template <int R>
struct Block {
  const float* x[R];
  float* y[R];
  std::int64_t first;
};

// -Σc and Σc² of a block's rows, c = x - shift with shift the row's first element, column k
// into slot k % A (the masked last vector into the slot after the last column's), so that
// each accumulator waits on a chain A times shorter.
template <int R, int A>
struct BlockSums {
  __m256 shift[R], dev[R][A], sq[R][A];

  explicit BlockSums(const Block<R>& b) {
    for (int r = 0; r < R; ++r) {
      shift[r] = _mm256_set1_ps(b.x[r][0]);
      for (int a = 0; a < A; ++a) dev[r][a] = sq[r][a] = _mm256_setzero_ps();
    }
  }

  void add(int r, int slot, __m256 c) {
    dev[r][slot] = _mm256_add_ps(dev[r][slot], c);
    sq[r][slot] = _mm256_fmadd_ps(c, c, sq[r][slot]);
  }

  // shift - x: the load of x folds into the subtraction; the sum is negated back, exactly.
  void add_column(const Block<R>& b, int k, int slot) {
    for (int r = 0; r < R; ++r) {
      add(r, slot, _mm256_sub_ps(shift[r], _mm256_loadu_ps(b.x[r] + 8 * k)));
    }
  }

  // The masked last vector: its lanes past the row's end must add nothing.
  void add_tail(const Block<R>& b, const Width& w) {
    const __m256 keep = _mm256_castsi256_ps(w.mask);
    with_slot<A>(w.nv % A, [&](auto slot) {
      for (int r = 0; r < R; ++r) {
        const __m256 c = _mm256_sub_ps(shift[r], load_tail(b.x[r] + 8 * w.nv, w.mask));
        add(r, slot, _mm256_and_ps(c, keep));
      }
    });
  }

  // Columns [0, nv) in slots k % A, each followed by `column(k)` of the caller's, so that one
  // loop can write a block and sum the next. The sum's loads come before the caller's stores
  // of the same column: a load issued after a store to the same address modulo 4 KiB waits
  // for it (x and y page-aligned, at d 1024 every column of the next row does), one issued
  // before never does. Loads first made the forward 1.07-1.49x faster from L3 at d 256-1024
  // and as fast in L1, with the same bits ([2048, d], medians of 21-31 alternated rounds,
  // 2026-11-27, /tmp/s14/abr.cpp); in bench_kernels (op GB/s, medians of 3 alternated runs)
  // 1.17 / 1.11x at d 512 on 1 / 2 threads, 1.24x at d 1024 on one, 0.96-1.00x elsewhere.
  template <class F>
  [[gnu::always_inline]] void add_columns(const Block<R>& b, int nv, F column) {
    int k = 0;
    for (; k + A <= nv; k += A) {
      for (int a = 0; a < A; ++a) {
        add_column(b, k + a, a);
        column(k + a);
      }
    }
    for (; k < nv; ++k) {
      with_slot<A>(k % A, [&](auto slot) { add_column(b, k, slot); });
      column(k);
    }
  }

  // Row r's slots added in a fixed order.
  __m256 total_dev(int r) const { return fold(dev[r]); }
  __m256 total_sq(int r) const { return fold(sq[r]); }

 private:
  static __m256 fold(const __m256 (&v)[A]) {
    if constexpr (A == 1) return v[0];
    else if constexpr (A == 2) return _mm256_add_ps(v[0], v[1]);
    else return _mm256_add_ps(_mm256_add_ps(v[0], v[1]), _mm256_add_ps(v[2], v[3]));
  }
};

// Σc and Σc² of c = x - shift over a row: the second pass of a row whose first element is an
// outlier.
inline void shifted_sums(const float* x, const Width& w, float shift, float& sum_c,
                         float& sum_cc) {
  const __m256 k = _mm256_set1_ps(shift);
  __m256 dev = _mm256_setzero_ps();
  __m256 sq = _mm256_setzero_ps();
  for (int j = 0; j < w.nv; ++j) {
    const __m256 c = _mm256_sub_ps(_mm256_loadu_ps(x + 8 * j), k);
    dev = _mm256_add_ps(dev, c);
    sq = _mm256_fmadd_ps(c, c, sq);
  }
  if (w.tail) {
    const __m256 c = _mm256_and_ps(_mm256_sub_ps(load_tail(x + 8 * w.nv, w.mask), k),
                                   _mm256_castsi256_ps(w.mask));
    dev = _mm256_add_ps(dev, c);
    sq = _mm256_fmadd_ps(c, c, sq);
  }
  const __m128 s = sum_lanes4(dev, sq, dev, sq);
  sum_c = _mm_cvtss_f32(s);
  sum_cc = _mm_cvtss_f32(_mm_movehdup_ps(s));
}

struct BlockStats {
  __m128 mean, rstd;  // lane r: row r of the block
};

// out[r] = lane r of v in all 8 lanes, r < R.
template <int R>
inline void broadcast_lanes(__m128 v, __m256 (&out)[R]) {
  out[0] = _mm256_broadcastss_ps(v);
  if constexpr (R > 1) out[1] = _mm256_broadcastss_ps(_mm_movehdup_ps(v));
  if constexpr (R > 2) {
    out[2] = _mm256_broadcastss_ps(_mm_movehl_ps(v, v));
    out[3] = _mm256_broadcastss_ps(_mm_shuffle_ps(v, v, _MM_SHUFFLE(3, 3, 3, 3)));
  }
}

// 1 / sqrt(v) for v > 0: the 12-bit estimate and one Newton step, r (3/2 - v r² / 2), within
// 2.1e-7 of the exact value relative (every 13th normal float, 2026-11-27; the tests hold
// rstd to 1e-6). It ends the chain every block waits on, and takes about half as long as a
// square root and a division. The estimate's bits are the CPU's own: the same on every run
// here, not necessarily on another vendor's CPU.
inline __m128 reciprocal_sqrt(__m128 v) {
  const __m128 r = _mm_rsqrt_ps(v);
  const __m128 half_v_r = _mm_mul_ps(_mm_mul_ps(_mm_set1_ps(0.5f), v), r);
  return _mm_mul_ps(r, _mm_fnmadd_ps(half_v_r, r, _mm_set1_ps(1.5f)));
}

// The statistics of block b from its sums; stores the mean and rstd of its rows before `end`.
template <int R, int A>
inline BlockStats finish_block(const BlockSums<R, A>& s, const Block<R>& b, const Width& w,
                               float inv_d, float eps, float* mean_out, float* rstd_out,
                               std::int64_t end) {
  static_assert(R == 1 || R == 2 || R == 4);
  // -Σc and Σc² of the rows in lanes 0 to R - 1 (the other lanes hold copies).
  __m128 sum_c, sum_cc;
  if constexpr (R == 4) {
    sum_c = sum_lanes4(s.total_dev(0), s.total_dev(1), s.total_dev(2), s.total_dev(3));
    sum_cc = sum_lanes4(s.total_sq(0), s.total_sq(1), s.total_sq(2), s.total_sq(3));
  } else if constexpr (R == 2) {
    sum_c = sum_lanes4(s.total_dev(0), s.total_dev(1), s.total_sq(0), s.total_sq(1));
    sum_cc = _mm_movehl_ps(sum_c, sum_c);
  } else {
    sum_c = sum_lanes4(s.total_dev(0), s.total_sq(0), s.total_dev(0), s.total_sq(0));
    sum_cc = _mm_movehdup_ps(sum_c);
  }
  sum_c = _mm_xor_ps(sum_c, _mm_set1_ps(-0.0f));
  __m128 shift = _mm_setr_ps(b.x[0][0], b.x[1 % R][0], b.x[2 % R][0], b.x[3 % R][0]);
  const __m128 id = _mm_set1_ps(inv_d);
  __m128 spread = _mm_sub_ps(sum_cc, _mm_mul_ps(_mm_mul_ps(sum_c, sum_c), id));  // d var
  // !(Σc² <= 16 d var): NaN rows take the second pass too, as the generic loops see them.
  const int outliers = _mm_movemask_ps(_mm_cmp_ps(
                           sum_cc, _mm_mul_ps(_mm_set1_ps(16.0f), spread), _CMP_NLE_UQ)) &
                       ((1 << R) - 1);
  if (__builtin_expect(outliers != 0, 0)) {
    alignas(16) float sh[4], sc[4], scc[4];
    _mm_store_ps(sh, shift);
    _mm_store_ps(sc, sum_c);
    _mm_store_ps(scc, sum_cc);
    for (int r = 0; r < R; ++r) {
      if ((outliers >> r) & 1) {
        sh[r] += sc[r] * inv_d;
        shifted_sums(b.x[r], w, sh[r], sc[r], scc[r]);
      }
    }
    shift = _mm_load_ps(sh);
    sum_c = _mm_load_ps(sc);
    sum_cc = _mm_load_ps(scc);
    spread = _mm_sub_ps(sum_cc, _mm_mul_ps(_mm_mul_ps(sum_c, sum_c), id));
  }
  const __m128 var = _mm_max_ps(_mm_mul_ps(spread, id), _mm_setzero_ps());
  const BlockStats st{_mm_add_ps(shift, _mm_mul_ps(sum_c, id)),
                      reciprocal_sqrt(_mm_add_ps(var, _mm_set1_ps(eps)))};
  if constexpr (R == 1) {
    _mm_store_ss(mean_out + b.first, st.mean);
    _mm_store_ss(rstd_out + b.first, st.rstd);
  } else {
    alignas(16) float m[4], rs[4];
    _mm_store_ps(m, st.mean);
    _mm_store_ps(rs, st.rstd);
    const std::int64_t n = std::min<std::int64_t>(R, end - b.first);
    for (std::int64_t r = 0; r < n; ++r) {
      mean_out[b.first + r] = m[r];
      rstd_out[b.first + r] = rs[r];
    }
  }
  return st;
}

// Writes the outputs of block `out` and, if `next` is not null, sums the statistics of that
// block into `sums` in the same column loop.
template <bool PrefetchOutputs, int R, int A>
inline void output_block(const Block<R>& out, const BlockStats& st, const float* gamma,
                         const float* beta, const Width& w, const Block<R>* next,
                         BlockSums<R, A>* sums) {
  // Broadcast in registers: through memory, the store and the reload sit on the chain that
  // ends each block, which nothing else in the loop hides.
  __m256 m[R], rs[R];
  broadcast_lanes<R>(st.mean, m);
  broadcast_lanes<R>(st.rstd, rs);
  // -(x - mean) rstd, so that the load of x folds into the subtraction; y is the same to the
  // bit. All rows are read before any is written: in place, a repeated last row is several
  // rows.
  auto column = [&](int k) {
    // The next block's outputs, a line of each row every other column, asked for with
    // intent to write where that pays (layernorm_rows.hpp, prefetch_for_write).
    if (PrefetchOutputs && next != nullptr && k % 2 == 0) {
      for (int r = 0; r < R; ++r) __builtin_prefetch(next->y[r] + 8 * k, 1, 3);
    }
    const __m256 gv = _mm256_loadu_ps(gamma + 8 * k);
    const __m256 bv = _mm256_loadu_ps(beta + 8 * k);
    __m256 h[R];
    for (int r = 0; r < R; ++r) {
      h[r] = _mm256_mul_ps(_mm256_sub_ps(m[r], _mm256_loadu_ps(out.x[r] + 8 * k)), rs[r]);
    }
    for (int r = 0; r < R; ++r) {
      _mm256_storeu_ps(out.y[r] + 8 * k, _mm256_fnmadd_ps(h[r], gv, bv));
    }
  };
  const int nv = w.nv;
  if (next == nullptr) {
    for (int k = 0; k < nv; ++k) column(k);
  } else {
    sums->add_columns(*next, nv, column);
    if (w.tail) sums->add_tail(*next, w);
  }
  if (w.tail) {
    const __m256 gv = load_tail(gamma + 8 * nv, w.mask);
    const __m256 bv = load_tail(beta + 8 * nv, w.mask);
    __m256 h[R];
    for (int r = 0; r < R; ++r) {
      h[r] = _mm256_mul_ps(_mm256_sub_ps(m[r], load_tail(out.x[r] + 8 * nv, w.mask)), rs[r]);
    }
    for (int r = 0; r < R; ++r) {
      _mm256_maskstore_ps(out.y[r] + 8 * nv, w.mask, _mm256_fnmadd_ps(h[r], gv, bv));
    }
  }
}

template <int R, int A>
inline BlockStats sum_block(const Block<R>& b, const Width& w, float inv_d, float eps,
                            float* mean, float* rstd, std::int64_t end) {
  BlockSums<R, A> sums(b);
  sums.add_columns(b, w.nv, [](int) {});
  if (w.tail) sums.add_tail(b, w);
  return finish_block(sums, b, w, inv_d, eps, mean, rstd, end);
}

// Rows [begin, end) of the forward (end > begin), in blocks from `begin`; `last` is the index
// of the tensor's last row, which fills a block that runs past it.
template <bool PrefetchOutputs, int R = kBlockRows, int A = kSlots>
inline void forward_rows(const float* x, const float* gamma, const float* beta, std::int64_t d,
                         std::int64_t begin, std::int64_t end, std::int64_t last, float inv_d,
                         float eps, float* y, float* mean, float* rstd) {
  const Width w(d);
  auto block = [&](std::int64_t first) {
    Block<R> b;
    b.first = first;
    for (int r = 0; r < R; ++r) {
      const std::int64_t i = std::min(first + r, last);
      b.x[r] = x + i * d;
      b.y[r] = y + i * d;
    }
    return b;
  };
  Block<R> cur = block(begin);
  BlockStats st = sum_block<R, A>(cur, w, inv_d, eps, mean, rstd, end);
  for (std::int64_t i0 = begin; i0 < end; i0 += R) {
    if (i0 + R < end) {
      const Block<R> next = block(i0 + R);
      BlockSums<R, A> sums(next);
      output_block<PrefetchOutputs, R, A>(cur, st, gamma, beta, w, &next, &sums);
      st = finish_block(sums, next, w, inv_d, eps, mean, rstd, end);
      cur = next;
    } else {
      output_block<PrefetchOutputs, R, A>(cur, st, gamma, beta, w, nullptr, nullptr);
    }
  }
}

// ---------------------------------------------------------------------------------------
// Input gradient: dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy gamma, xhat = (x - mean)
// rstd. One loop over the columns writes dx of row i and sums Σg and Σg·(x - mean) of
// row i + 2, so that the chain that turns a row's sums into its constants (horizontal sums,
// products) runs a whole loop before they are needed: with row i + 1, as before 2026-11-27,
// the loop waited on it at every row. Summing two rows ahead made the input gradient
// 1.09-1.54x faster at d 64-384 and 0.96-1.02x as fast at d 512-1024 ([2048, d], medians of 31
// alternated rounds; 0.84-0.94x on 8-16 rows of d 512 and 1024, where the two rows summed
// alone at the start weigh more). The sums alternate between two accumulators by column, as in
// the forward. Per element the loop computes dx = a g - b - c (x - mean) with a = rstd, b =
// rstd mean(g) and c = rstd³ mean(g (x - mean)), the same value as the formula above with rstd
// taken out of the sums and into the row's constants: 8 floating-point operations per vector
// of both rows where the formula as written takes 11, which bound the loop on the Zen 3.

struct RowSums {
  __m256 g[2], gx[2];  // Σg and Σg·(x - mean)
};

struct RowInput {
  const float* dy;
  const float* x;
  __m256 mean, rstd;
};

inline void add_row(const RowInput& row, __m256 dy, __m256 x, __m256 gamma, int slot,
                    RowSums& s) {
  const __m256 g = _mm256_mul_ps(dy, gamma);
  s.g[slot] = _mm256_add_ps(s.g[slot], g);
  s.gx[slot] = _mm256_fmadd_ps(g, _mm256_sub_ps(x, row.mean), s.gx[slot]);
}

inline void add_row_column(const RowInput& row, const float* gamma, int k, int slot,
                           RowSums& s) {
  add_row(row, _mm256_loadu_ps(row.dy + 8 * k), _mm256_loadu_ps(row.x + 8 * k),
          _mm256_loadu_ps(gamma + 8 * k), slot, s);
}

// Masked lanes load as 0: g = 0 there, so g (x - mean) = 0.
inline void add_row_tail(const RowInput& row, const float* gamma, const Width& w, RowSums& s) {
  add_row(row, load_tail(row.dy + 8 * w.nv, w.mask), load_tail(row.x + 8 * w.nv, w.mask),
          load_tail(gamma + 8 * w.nv, w.mask), w.nv % 2, s);
}

// The row's constants a, b, c of dx = a g - b - c (x - mean), from its sums.
struct RowGradient {
  __m256 a, b, c;
};

inline RowGradient row_gradient(const RowInput& row, const RowSums& sums, float inv_d) {
  const __m128 totals = sum_lanes4(_mm256_add_ps(sums.g[0], sums.g[1]),
                                   _mm256_add_ps(sums.gx[0], sums.gx[1]),
                                   _mm256_setzero_ps(), _mm256_setzero_ps());
  const __m256 mean_g = _mm256_set1_ps(_mm_cvtss_f32(totals) * inv_d);
  const __m256 mean_gxm = _mm256_set1_ps(_mm_cvtss_f32(_mm_movehdup_ps(totals)) * inv_d);
  const __m256 rstd2 = _mm256_mul_ps(row.rstd, row.rstd);
  return {row.rstd, _mm256_mul_ps(row.rstd, mean_g),
          _mm256_mul_ps(_mm256_mul_ps(rstd2, row.rstd), mean_gxm)};
}

inline __m256 input_gradient(__m256 dy, __m256 x, __m256 gamma, const RowInput& row,
                             const RowGradient& k) {
  const __m256 g = _mm256_mul_ps(dy, gamma);
  return _mm256_fnmadd_ps(k.c, _mm256_sub_ps(x, row.mean), _mm256_fmsub_ps(k.a, g, k.b));
}

inline RowSums no_sums() {
  return {{_mm256_setzero_ps(), _mm256_setzero_ps()}, {_mm256_setzero_ps(), _mm256_setzero_ps()}};
}

// The sums of one row in a loop of their own: the first two rows of a range.
inline RowSums row_sums(const RowInput& row, const float* gamma, const Width& w) {
  RowSums s = no_sums();
  for (int k = 0; k < w.nv; ++k) add_row_column(row, gamma, k, k % 2, s);
  if (w.tail) add_row_tail(row, gamma, w, s);
  return s;
}

inline void backward_input_rows(const float* dy, const float* x, const float* gamma,
                                const float* mean, const float* rstd, std::int64_t d,
                                std::int64_t begin, std::int64_t end, float inv_d, float* dx) {
  const Width w(d);
  auto row_at = [&](std::int64_t i) {
    return RowInput{dy + i * d, x + i * d, _mm256_set1_ps(mean[i]), _mm256_set1_ps(rstd[i])};
  };
  // The rows whose dx the next two loops write, with their constants.
  RowInput cur = row_at(begin);
  RowInput next = begin + 1 < end ? row_at(begin + 1) : cur;
  RowGradient cur_grad = row_gradient(cur, row_sums(cur, gamma, w), inv_d);
  RowGradient next_grad = row_gradient(next, row_sums(next, gamma, w), inv_d);
  for (std::int64_t i = begin; i < end; ++i) {
    float* out = dx + i * d;
    // The last two rows sum a row again, unused, rather than test for one in the loop.
    const RowInput ahead = i + 2 < end ? row_at(i + 2) : cur;
    RowSums ahead_sums = no_sums();
    // dx may be dy (in place): row i's dy is read before its dx is written, column by column,
    // and rows i + 1 and i + 2 are not written until later loops.
    auto column = [&](int k, int slot) {
      const __m256 gv = _mm256_loadu_ps(gamma + 8 * k);
      const __m256 v = input_gradient(_mm256_loadu_ps(cur.dy + 8 * k),
                                      _mm256_loadu_ps(cur.x + 8 * k), gv, cur, cur_grad);
      add_row(ahead, _mm256_loadu_ps(ahead.dy + 8 * k), _mm256_loadu_ps(ahead.x + 8 * k), gv,
              slot, ahead_sums);
      _mm256_storeu_ps(out + 8 * k, v);
    };
    int k = 0;
    for (; k + 2 <= w.nv; k += 2) {
      column(k, 0);
      column(k + 1, 1);
    }
    if (k < w.nv) column(k, 0);
    if (w.tail) {
      add_row_tail(ahead, gamma, w, ahead_sums);
      const __m256 v = input_gradient(load_tail(cur.dy + 8 * w.nv, w.mask),
                                      load_tail(cur.x + 8 * w.nv, w.mask),
                                      load_tail(gamma + 8 * w.nv, w.mask), cur, cur_grad);
      _mm256_maskstore_ps(out + 8 * w.nv, w.mask, v);
    }
    cur = next;
    cur_grad = next_grad;
    next = ahead;
    next_grad = row_gradient(ahead, ahead_sums, inv_d);
  }
}

// ---------------------------------------------------------------------------------------
// Weight gradient: adds rows [begin, end) of dy ⊙ xhat and dy into the partials pg and pb
// (padded to whole 16-float lines, so a full vector past d stays inside them), kWeightRows
// rows at a time, each group of rows sweeping all the columns: a column's partials are
// loaded, the rows added in order and stored back (2 d floats, in L1). Each column's sum
// runs over the rows in order whatever the grouping, so the bits do not depend on it.
//
// Measured on the Zen 3 (one thread, [2048, d], each variant alternated with the others and
// with memcpy in one process, median CPU times): 4 rows at a time 76-88% of memcpy's rate at
// d 256 and 512, 110-145% at d 1024; 1 row (the generic loops' order) 60-75%, 2 rows 50-63%;
// the AVX-512 kernel's layout, column blocks of 4 vectors summed in registers over tiles of 8
// rows, 50-63% (72-91% at d 1024). The column blocks read 128 bytes of each of 16 rows in
// turn, more streams than the prefetchers follow.
inline constexpr int kWeightRows = 4;

template <int N>
inline void weight_row_group(const float* dy, const float* x, const float* mean,
                             const float* rstd, std::int64_t d, const Width& w, std::int64_t i0,
                             bool first, float* pg, float* pb) {
  __m256 mv[N], rv[N];
  const float* dyr[N];
  const float* xr[N];
  for (int r = 0; r < N; ++r) {
    mv[r] = _mm256_set1_ps(mean[i0 + r]);
    rv[r] = _mm256_set1_ps(rstd[i0 + r]);
    dyr[r] = dy + (i0 + r) * d;
    xr[r] = x + (i0 + r) * d;
  }
  auto column = [&](std::int64_t c, bool masked) {
    __m256 acc_g = first ? _mm256_setzero_ps() : _mm256_loadu_ps(pg + c);
    __m256 acc_b = first ? _mm256_setzero_ps() : _mm256_loadu_ps(pb + c);
    for (int r = 0; r < N; ++r) {
      // Lanes past d: dy loads as 0, and 0 · xhat adds 0 (or NaN, for a NaN row, into lanes
      // that are never read).
      const __m256 dyv = masked ? load_tail(dyr[r] + c, w.mask) : _mm256_loadu_ps(dyr[r] + c);
      const __m256 xv = masked ? load_tail(xr[r] + c, w.mask) : _mm256_loadu_ps(xr[r] + c);
      const __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(xv, mv[r]), rv[r]);
      acc_g = _mm256_fmadd_ps(dyv, xhat, acc_g);
      acc_b = _mm256_add_ps(acc_b, dyv);
    }
    _mm256_storeu_ps(pg + c, acc_g);
    _mm256_storeu_ps(pb + c, acc_b);
  };
  for (std::int64_t v = 0; v < w.nv; ++v) column(8 * v, false);
  if (w.tail) column(8 * w.nv, true);
}

inline void weight_rows(const float* dy, const float* x, const float* mean, const float* rstd,
                        std::int64_t d, std::int64_t begin, std::int64_t end, float* pg,
                        float* pb) {
  const Width w(d);
  std::int64_t i = begin;
  for (; i + kWeightRows <= end; i += kWeightRows) {
    weight_row_group<kWeightRows>(dy, x, mean, rstd, d, w, i, i == begin, pg, pb);
  }
  for (; i < end; ++i) weight_row_group<1>(dy, x, mean, rstd, d, w, i, i == begin, pg, pb);
}

}  // namespace spw::ops::layernorm_avx2

#endif
