#include "kernels/ops/attention_tiled.hpp"

#include <algorithm>
#include <cmath>

#include "kernels/ops/attention_softmax.hpp"
#include "kernels/ops/transpose16.hpp"
#include "kernels/vecmath_avx512.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace spw::ops::attention_detail {

#if defined(__AVX512F__)

namespace {

constexpr std::int64_t kVector = 16;  // floats in one AVX-512 register
// Query rows per softmax block of the backward. Blocks stop their scores at their last row,
// so the masked flops are half a 16 x 16 square per block; micro-tiles are 8 rows, so 16
// keeps both whole.
constexpr std::int64_t kRowBlock = 16;
constexpr std::int64_t kTileRows = 8;

std::int64_t padded(std::int64_t seq) { return (seq + kVector - 1) / kVector * kVector; }

// The softmaxes run on scores in log2 units, 2^(s·log2 e) = e^s, with log2 e folded into the
// score products' scale: exp2_16 is 10 instructions against 16 for e^x.
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2 = 0.693147180559945309f;

// Queries per block of the forward: two vectors of them side by side in a score tile, which
// keeps the 8 × 32 register tile for Sᵀ = K·Qᵀ.
constexpr std::int64_t kQueryBlock = 32;
std::int64_t forward_rows(std::int64_t seq) {
  return (seq + kQueryBlock - 1) / kQueryBlock * kQueryBlock;
}

// Lanes [j, j + 16) of a row that lie before `len`.
inline __mmask16 valid_lanes(std::int64_t j, std::int64_t len) {
  const std::int64_t n = len - j;
  return n >= 16 ? static_cast<__mmask16>(0xFFFF)
                 : n <= 0 ? static_cast<__mmask16>(0)
                          : static_cast<__mmask16>((1u << n) - 1u);
}

// Lanes (queries q0..q0+15) that attend key q0 + offset, 0 <= offset < 16: the causal mask of
// a diagonal vector.
inline __mmask16 causal_lanes(std::int64_t offset) {
  return static_cast<__mmask16>(0xFFFFu << offset);
}

// One extra vector per score row, so that a power-of-two sequence does not put every row of
// a tile in the same cache sets.
std::int64_t score_stride(std::int64_t seq) { return padded(seq) + kVector; }

// What the dP = dO·Vᵀ product of the backward needs to finish its tiles as P and dS itself,
// instead of storing dP for a separate softmax pass that reads it back. Pointers and indices
// are those of the tile's first row and column.
struct SoftmaxGrad {
  float* p;             // in: scores in log2 units; out: P (zero past each row's diagonal)
  float* g;             // out: dS
  std::int64_t ld;      // of p and g
  const float* shift;   // per row: lse · log2 e
  const float* delta;   // per row: dot(dO, O)
  std::int64_t first_query, first_key, seq;  // rows from seq on become zeros
};

// C[rows × 16·NV] = alpha · A[R × k] · B[k × 16·NV], with A(r, p) = a[r·rs_a + p·cs_a] and B
// row-major; with a row_scale, row r of C is scaled by row_scale[r] instead of alpha. All R
// rows of A are read (they must be readable memory), only the first `rows` rows of C are
// written. 8 × 32 keeps 16 accumulators, 2 B vectors and a broadcast in the 32 registers, and
// issues 16 FMAs per 10 loads.
template <int R, int NV, bool kGrad = false>
inline void tile(std::int64_t k, float alpha, const float* row_scale, const float* a,
                 std::int64_t rs_a, std::int64_t cs_a, const float* b, std::int64_t ldb, float* c,
                 std::int64_t ldc, std::int64_t rows, const SoftmaxGrad* grad = nullptr) {
  __m512 acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  for (std::int64_t p = 0; p < k; ++p) {
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(b + p * ldb + kVector * v);
    const float* ap = a + p * cs_a;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(ap[r * rs_a]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
  if constexpr (kGrad) {
    // The accumulators are dP: turn the tile's scores into P and write dS = P ⊙ (dP − δ).
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const std::int64_t i = grad->first_query + r;
      float* p_row = grad->p + r * grad->ld;
      float* g_row = grad->g + r * grad->ld;
      if (i >= grad->seq) {
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
          _mm512_storeu_ps(p_row + kVector * v, _mm512_setzero_ps());
          _mm512_storeu_ps(g_row + kVector * v, _mm512_setzero_ps());
        }
        continue;
      }
      const __m512 shift = _mm512_set1_ps(grad->shift[r]);
      const __m512 delta = _mm512_set1_ps(grad->delta[r]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        const __mmask16 valid = valid_lanes(grad->first_key + kVector * v, i + 1);
        const __m512 prob = _mm512_maskz_mov_ps(
            valid, vecmath::exp2_16(_mm512_sub_ps(_mm512_loadu_ps(p_row + kVector * v), shift)));
        _mm512_storeu_ps(p_row + kVector * v, prob);
        _mm512_storeu_ps(g_row + kVector * v, _mm512_mul_ps(prob, _mm512_sub_ps(acc[r][v], delta)));
      }
    }
    return;
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    if (r >= rows) break;
    const __m512 scale = _mm512_set1_ps(row_scale != nullptr ? row_scale[r] : alpha);
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      _mm512_storeu_ps(c + r * ldc + kVector * v, _mm512_mul_ps(acc[r][v], scale));
    }
  }
}

// C[m × n] = alpha · A · B (or row i scaled by row_scale[i]) for m a multiple of 8 and n of
// 16; rows of C from `rows` on are not written (A must still be readable there).
// With first_row >= 0, A's rows are the queries first_row.. and k runs over keys, which a
// causal row attends only up to itself: each tile of 8 rows stops its k loop after its last
// row's key (the diagonal block's first tile skips half its products).
void product(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
             std::int64_t rs_a, std::int64_t cs_a, const float* b, std::int64_t ldb, float* c,
             std::int64_t ldc, std::int64_t rows, const float* row_scale = nullptr,
             std::int64_t first_row = -1) {
  for (std::int64_t i = 0; i < m && i < rows; i += kTileRows) {
    const float* ai = a + i * rs_a;
    const float* si = row_scale != nullptr ? row_scale + i : nullptr;
    float* ci = c + i * ldc;
    const std::int64_t valid = std::min(kTileRows, rows - i);
    const std::int64_t ki = first_row >= 0 ? std::min(k, first_row + i + kTileRows) : k;
    std::int64_t j = 0;
    for (; j + 2 * kVector <= n; j += 2 * kVector) {
      tile<kTileRows, 2>(ki, alpha, si, ai, rs_a, cs_a, b + j, ldb, ci + j, ldc, valid);
    }
    if (j < n) tile<kTileRows, 1>(ki, alpha, si, ai, rs_a, cs_a, b + j, ldb, ci + j, ldc, valid);
  }
}

// dP = dO·Vᵀ over m rows (a multiple of 8) and n columns (of 16), k = hd, finished as P and
// dS by the tiles (SoftmaxGrad) for all m rows.
void product_grad(std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
                  std::int64_t lda, const float* b, std::int64_t ldb, const SoftmaxGrad& grad) {
  for (std::int64_t i = 0; i < m; i += kTileRows) {
    std::int64_t j = 0;
    for (; j < n; j += 2 * kVector) {
      SoftmaxGrad t = grad;
      t.p += i * grad.ld + j;
      t.g += i * grad.ld + j;
      t.shift += i;
      t.delta += i;
      t.first_query += i;
      t.first_key += j;
      if (j + 2 * kVector <= n) {
        tile<kTileRows, 2, true>(k, 1.0f, nullptr, a + i * lda, lda, 1, b + j, ldb, nullptr, 0,
                                 kTileRows, &t);
      } else {
        tile<kTileRows, 1, true>(k, 1.0f, nullptr, a + i * lda, lda, 1, b + j, ldb, nullptr, 0,
                                 kTileRows, &t);
      }
    }
  }
}

// A pair's rows are hd floats (a cache line or two) spaced a row of qkv or y apart (3-12 KiB):
// the hardware prefetcher does not follow them, so each row was a demand miss, and with
// the copy in between only a row or two of misses overlapped. Gathers touch rows this far
// ahead first (measured on gpt-s shapes: the copies and the dot(dO, O) pass took half of the
// backward's time before).
constexpr std::int64_t kPrefetchRows = 8;

inline void prefetch_row(const float* row, std::int64_t floats) {
  for (std::int64_t c = 0; c < floats; c += kVector) __builtin_prefetch(row + c, 0, 3);
}

inline void prefetch_ahead(const float* src, std::int64_t ld, std::int64_t i, std::int64_t seq,
                           std::int64_t hd) {
  if (i + kPrefetchRows < seq) prefetch_row(src + (i + kPrefetchRows) * ld, hd);
}

// dst[rows × hd] = the pair's rows, zero past seq (rows >= seq, a multiple of 16).
void copy_rows(const float* src, std::int64_t ld, std::int64_t seq, std::int64_t hd,
               float* dst, std::int64_t rows) {
  for (std::int64_t i = 0; i < std::min(kPrefetchRows, seq); ++i) prefetch_row(src + i * ld, hd);
  for (std::int64_t i = 0; i < seq; ++i) {
    prefetch_ahead(src, ld, i, seq, hd);
    for (std::int64_t c = 0; c < hd; c += kVector) {
      _mm512_storeu_ps(dst + i * hd + c, _mm512_loadu_ps(src + i * ld + c));
    }
  }
  std::fill(dst + seq * hd, dst + rows * hd, 0.0f);
}

// dst[hd × cols] = the pair's rows transposed, zero past seq (cols >= seq, a multiple of
// 16): 16 x 16 blocks through registers (a scalar transpose took an eighth of the backward's
// time).
void copy_transposed(const float* src, std::int64_t ld, std::int64_t seq, std::int64_t hd,
                     float* dst, std::int64_t cols) {
  for (std::int64_t j = 0; j < std::min(kVector, seq); ++j) prefetch_row(src + j * ld, hd);
  for (std::int64_t j0 = 0; j0 < seq; j0 += kVector) {
    const std::int64_t rows = std::min(kVector, seq - j0);
    for (std::int64_t j = j0 + kVector; j < std::min(j0 + 2 * kVector, seq); ++j) {
      prefetch_row(src + j * ld, hd);
    }
    for (std::int64_t c0 = 0; c0 < hd; c0 += kVector) {
      __m512 r[kVector];
      for (std::int64_t i = 0; i < kVector; ++i) {
        r[i] = i < rows ? _mm512_loadu_ps(src + (j0 + i) * ld + c0) : _mm512_setzero_ps();
      }
      transpose16_in_registers(r);
      for (std::int64_t c = 0; c < kVector; ++c) _mm512_storeu_ps(dst + (c0 + c) * cols + j0, r[c]);
    }
  }
  for (std::int64_t c = 0; c < hd; ++c) {
    std::fill(dst + c * cols + padded(seq), dst + (c + 1) * cols, 0.0f);
  }
}

// delta[i] = dot(dO_i, O_i) for every row: the softmax backward's per-row term, gathered in
// one prefetched pass over O instead of a miss per row inside the exp loop.
void row_deltas(const float* d_out, const float* out, std::int64_t ld, std::int64_t seq,
                std::int64_t hd, float* delta) {
  for (std::int64_t i = 0; i < std::min(kPrefetchRows, seq); ++i) prefetch_row(out + i * ld, hd);
  for (std::int64_t i = 0; i < seq; ++i) {
    prefetch_ahead(out, ld, i, seq, hd);
    delta[i] = row_delta(d_out + i * hd, out + i * ld, hd);
  }
}

// Requests the next pair's rows (NextRows) in equal slices, one slice per step of this pair's
// work, so that the misses overlap the products instead of bunching up in its copies.
class Prefetcher {
 public:
  Prefetcher(const NextRows* next, std::int64_t seq, std::int64_t hd, std::int64_t steps)
      : next_(next), seq_(seq), hd_(hd) {
    if (next_ != nullptr) {
      total_ = next_->matrices * seq_;
      per_step_ = (total_ + steps - 1) / steps;
    }
  }

  void step() {
    const std::int64_t end = std::min(done_ + per_step_, total_);
    for (; done_ < end; ++done_) {
      const std::int64_t m = done_ / seq_;
      const float* row = next_->rows[m] + (done_ - m * seq_) * next_->ld[m];
      if (next_->written[m]) {
        for (std::int64_t c = 0; c < hd_; c += kVector) __builtin_prefetch(row + c, 1, kLocality);
      } else {
        for (std::int64_t c = 0; c < hd_; c += kVector) __builtin_prefetch(row + c, 0, kLocality);
      }
    }
  }

 private:
  // prefetcht2: prefetcht0 put the next pair in L1 among this pair's operands and was slower
  // than no prefetch at all; t1 measured like t2 at gpt-s and 6% slower on the gpt-m backward.
  // The rows the pair will write are asked for with PREFETCHW even on the Zen 4, where the
  // LayerNorm forward's cost more than they hid (write_prefetch.hpp): here they are few beside
  // the products, and read prefetches instead ran 0.92-1.02x as fast (bench_kernels'
  // op/attention rows, 3 runs of each build alternated, 2026-11-30, /tmp/s35/at-*).
  static constexpr int kLocality = 1;
  const NextRows* next_;
  std::int64_t seq_, hd_;
  std::int64_t total_ = 0, per_step_ = 0, done_ = 0;
};

// Both passes start from Q (rows) and Kᵀ, copied to the front of the thread's scratch.
struct Prepared {
  std::int64_t rows, ld_s;
  float scale;
  float* q;
  float* kt;
  float* rest;  // the scratch after them
};

Prepared prepare(const PairView& pair, float* scratch) {
  Prepared pre;
  pre.rows = padded(pair.seq);
  pre.ld_s = score_stride(pair.seq);
  pre.scale = 1.0f / std::sqrt(static_cast<float>(pair.hd));
  pre.q = scratch;
  pre.kt = pre.q + pre.rows * pair.hd;
  pre.rest = pre.kt + pre.rows * pair.hd;
  copy_rows(pair.q, pair.ld_qkv, pair.seq, pair.hd, pre.q, pre.rows);
  copy_transposed(pair.k, pair.ld_qkv, pair.seq, pair.hd, pre.kt, pre.rows);
  return pre;
}

}  // namespace

bool tiled_attention_fits(std::int64_t head_dim) {
  return head_dim > 0 && head_dim % kVector == 0;
}

std::size_t tiled_forward_scratch(std::int64_t seq, std::int64_t head_dim) {
  return static_cast<std::size_t>((3 * head_dim + kQueryBlock) * forward_rows(seq));
}

std::size_t tiled_backward_scratch(std::int64_t seq, std::int64_t head_dim) {
  return static_cast<std::size_t>(5 * padded(seq) * head_dim +
                                  2 * padded(seq) * score_stride(seq) + padded(seq));
}

// GCC 12 warns falsely that the intrinsics' undefined pass-through operands may be used
// uninitialized (GCC bug 105593, fixed in 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace {

// The softmax of 16 queries q0..q0+15 held in the lanes of a column of Sᵀ (rows of `ld`
// floats, scores in log2 units): it runs down the keys 0..q0+15, so each query's max and
// sum build up lane-wise with no reduction across a vector. Leaves Pᵀ unnormalised, with
// zeros where a key follows the lane's query; writes 1/sum of all 16 lanes and lse[q] of
// the lanes' queries q below `seq`. Not inlined: inside the pair's loop, among the tiles' 32 live
// registers, GCC kept the running sum on the stack and every key waited on a store-to-load
// round trip.
[[gnu::noinline]] void softmax_lanes(float* col, std::int64_t ld, std::int64_t q0,
                                     float* inv_sums, float* lse, std::int64_t seq) {
  const std::int64_t keys = q0 + kVector;  // the last lane's query attends keys < keys
  __m512 max = _mm512_set1_ps(-INFINITY);
  for (std::int64_t j = 0; j < q0; ++j) max = _mm512_max_ps(max, _mm512_loadu_ps(col + j * ld));
  for (std::int64_t j = q0; j < keys; ++j) {
    max = _mm512_mask_max_ps(max, causal_lanes(j - q0), max, _mm512_loadu_ps(col + j * ld));
  }
  __m512 sum = _mm512_setzero_ps();
  for (std::int64_t j = 0; j < q0; ++j) {
    float* row = col + j * ld;
    const __m512 e = vecmath::exp2_16(_mm512_sub_ps(_mm512_loadu_ps(row), max));
    sum = _mm512_add_ps(sum, e);
    _mm512_storeu_ps(row, e);
  }
  for (std::int64_t j = q0; j < keys; ++j) {
    float* row = col + j * ld;
    const __m512 e = _mm512_maskz_mov_ps(
        causal_lanes(j - q0), vecmath::exp2_16(_mm512_sub_ps(_mm512_loadu_ps(row), max)));
    sum = _mm512_add_ps(sum, e);
    _mm512_storeu_ps(row, e);
  }
  _mm512_storeu_ps(inv_sums, _mm512_div_ps(_mm512_set1_ps(1.0f), sum));
  alignas(64) float maxes[kVector];
  alignas(64) float sums[kVector];
  _mm512_store_ps(maxes, max);
  _mm512_store_ps(sums, sum);
  for (std::int64_t q = q0; q < seq; ++q) {
    lse[q] = maxes[q - q0] * kLn2 + std::log(sums[q - q0]);
  }
}

}  // namespace

void tiled_forward_pair(const PairView& pair, float* y, float* lse, float* scratch,
                        const NextRows* next) {
  const std::int64_t seq = pair.seq, hd = pair.hd, rows = forward_rows(seq);
  const float scale = kLog2e / std::sqrt(static_cast<float>(hd));  // scores in log2 units
  // Qᵀ for the score tiles' vectors; K and V by rows, packed because their rows lie a qkv
  // row apart, which maps them onto a few L1 sets.
  float* qt = scratch;
  float* k = qt + rows * hd;
  float* v = k + rows * hd;
  float* st = v + rows * hd;  // Sᵀ, then Pᵀ, of one query block: [rows keys × kQueryBlock]
  copy_transposed(pair.q, pair.ld_qkv, seq, hd, qt, rows);
  copy_rows(pair.k, pair.ld_qkv, seq, hd, k, rows);
  copy_rows(pair.v, pair.ld_qkv, seq, hd, v, rows);
  Prefetcher prefetcher(next, seq, hd, rows / kVector);

  alignas(64) float inv_sums[kQueryBlock];
  for (std::int64_t i0 = 0; i0 < seq; i0 += kQueryBlock) {
    // Sᵀ of keys 0..i0+31 against the block's queries; keys past i0+15 are masked for the
    // first 16 queries, so there only the second vector of queries is computed.
    product(i0 + kVector, kQueryBlock, hd, scale, k, hd, 1, qt + i0, rows, st, kQueryBlock,
            i0 + kVector);
    product(kVector, kVector, hd, scale, k + (i0 + kVector) * hd, hd, 1, qt + i0 + kVector, rows,
            st + (i0 + kVector) * kQueryBlock + kVector, kQueryBlock, kVector);
    for (std::int64_t half = 0; half < kQueryBlock / kVector; ++half) {
      prefetcher.step();
      const std::int64_t q0 = i0 + half * kVector;  // first query in the lanes
      softmax_lanes(st + half * kVector, kQueryBlock, q0, inv_sums + half * kVector, lse,
                    std::min(q0 + kVector, seq));
    }
    // O = Pᵀᵀ·V, each row scaled by its 1/sum: P stays unnormalised, which saves a pass.
    product(kQueryBlock, hd, i0 + kQueryBlock, 1.0f, st, 1, kQueryBlock, v, hd,
            y + i0 * pair.ld_out, pair.ld_out, seq - i0, inv_sums, i0);
  }
}

#pragma GCC diagnostic pop

void tiled_backward_pair(const PairView& pair, const float* dy, const float* y,
                         const float* lse, float* dq, float* dk, float* dv, float* scratch,
                         const NextRows* next) {
  const Prepared pre = prepare(pair, scratch);
  const std::int64_t seq = pair.seq, hd = pair.hd, rows = pre.rows, ld_s = pre.ld_s;
  Prefetcher prefetcher(next, seq, hd, rows / kRowBlock * 4 + (seq + kTileRows - 1) / kTileRows);
  const float scale = pre.scale;
  const float* q = pre.q;
  const float* kt = pre.kt;
  float* d_out = pre.rest;
  float* vt = d_out + rows * hd;
  float* probs = vt + rows * hd;
  float* grads = probs + rows * ld_s;
  float* delta = grads + rows * ld_s;
  float* k_rows = delta + rows;  // dS·K reads K by rows; packed for the same reason as V
  copy_rows(dy, pair.ld_out, seq, hd, d_out, rows);
  copy_rows(pair.k, pair.ld_qkv, seq, hd, k_rows, rows);
  copy_transposed(pair.v, pair.ld_qkv, seq, hd, vt, rows);
  row_deltas(d_out, y, pair.ld_out, seq, hd, delta);

  // Row blocks: P and dS of the lower triangle, and dQ, which needs only a block's own rows.
  alignas(64) float shifts[kRowBlock];
  for (std::int64_t i0 = 0; i0 < seq; i0 += kRowBlock) {
    const std::int64_t i1 = i0 + kRowBlock;
    float* p = probs + i0 * ld_s;
    float* g = grads + i0 * ld_s;
    for (std::int64_t r = 0; r < kRowBlock; ++r) {
      shifts[r] = i0 + r < seq ? lse[i0 + r] * kLog2e : 0.0f;
    }
    prefetcher.step();
    product(kRowBlock, i1, hd, scale * kLog2e, q + i0 * hd, hd, 1, kt, rows, p, ld_s, kRowBlock);
    prefetcher.step();
    product_grad(kRowBlock, i1, hd, d_out + i0 * hd, hd, vt, rows,
                 SoftmaxGrad{p, g, ld_s, shifts, delta + i0, i0, 0, seq});
    prefetcher.step();
    product(kRowBlock, hd, std::min(i1, seq), scale, g, ld_s, 1, k_rows, hd,
            dq + i0 * pair.ld_qkv, pair.ld_qkv, seq - i0, nullptr, i0);
    prefetcher.step();
  }
  // Tiles of 8 keys: key j is attended by queries j..seq-1 only, and every such row of P and
  // dS holds zeros (not stale data) from its diagonal to its block's end, which lies at or
  // past the tile's last key because blocks are 16 rows and tiles start at multiples of 8.
  for (std::int64_t j0 = 0; j0 < seq; j0 += kTileRows) {
    const std::int64_t k = seq - j0;
    prefetcher.step();
    product(kTileRows, hd, k, scale, grads + j0 * ld_s + j0, 1, ld_s, q + j0 * hd, hd,
            dk + j0 * pair.ld_qkv, pair.ld_qkv, k);
    product(kTileRows, hd, k, 1.0f, probs + j0 * ld_s + j0, 1, ld_s, d_out + j0 * hd, hd,
            dv + j0 * pair.ld_qkv, pair.ld_qkv, k);
  }
}

#elif !(defined(__AVX2__) && defined(__FMA__))
// Neither AVX-512 nor AVX2 with FMA (which attention_tiled_avx2.cpp serves): attention.cpp
// keeps to its BLIS implementation.

bool tiled_attention_fits(std::int64_t) { return false; }
std::size_t tiled_forward_scratch(std::int64_t, std::int64_t) { return 0; }
std::size_t tiled_backward_scratch(std::int64_t, std::int64_t) { return 0; }
void tiled_forward_pair(const PairView&, float*, float*, float*, const NextRows*) {}
void tiled_backward_pair(const PairView&, const float*, const float*, const float*, float*,
                         float*, float*, float*, const NextRows*) {}

#endif

}  // namespace spw::ops::attention_detail
