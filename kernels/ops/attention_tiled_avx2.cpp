// The register-tiled attention of attention_tiled.cpp for CPUs with AVX2 and FMA but no
// AVX-512 (Zen 2/3, Haswell to Ice Lake clients): the same passes and the same log2-unit
// softmax (vecmath::exp2_8 is exp2_16's polynomial), on 8-float registers. What changes is
// the shape of the micro-tiles, which must fit 16 registers instead of 32, and the masks,
// which become compare vectors loaded from lane tables.
#include "kernels/ops/attention_tiled.hpp"

#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/ops/attention_softmax.hpp"
#include "kernels/ops/transpose8.hpp"
#include "kernels/vecmath_avx2.hpp"

namespace spw::ops::attention_detail {

namespace {

constexpr std::int64_t kVector = 8;       // floats in one AVX2 register
constexpr std::int64_t kLineFloats = 16;  // floats in a cache line, the prefetch step
// Query rows per softmax block of the backward, a multiple of kTileRows. Each tile of a block
// stops its scores at the vector holding its last row's key, so the masked flops are at most
// a 4 x 8 rectangle per tile whatever the block's size.
constexpr std::int64_t kRowBlock = 16;
// Rows of a micro-tile. 4 rows of up to 3 vectors (4 x 24) keep 12 accumulators, 3 B vectors
// and a broadcast in the 16 registers and issue 12 FMAs per 7 loads; Zen 3 loads 2-3 per
// cycle and retires 2 FMAs, so the tile is bound by its FMAs.
constexpr std::int64_t kTileRows = 4;

std::int64_t padded(std::int64_t seq) { return (seq + kRowBlock - 1) / kRowBlock * kRowBlock; }

// Softmaxes in log2 units, as in attention_tiled.cpp: log2 e is folded into the scores' scale.
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2 = 0.693147180559945309f;

// Queries per block of the forward: two vectors of them side by side in a score tile, which
// makes Sᵀ = K·Qᵀ tiles 4 x 16 (8 accumulators, as many as Zen 3's 2 FMA pipes × 4 cycles
// of latency keep busy).
constexpr std::int64_t kQueryBlock = 2 * kVector;
std::int64_t forward_rows(std::int64_t seq) {
  return (seq + kQueryBlock - 1) / kQueryBlock * kQueryBlock;
}

// Lane masks as loads from tables: an all-ones lane is a lane to keep.
alignas(64) constexpr std::int32_t kOnesThenZeros[2 * kVector] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                                  0,  0,  0,  0,  0,  0,  0,  0};
alignas(64) constexpr std::int32_t kZerosThenOnes[2 * kVector] = {0,  0,  0,  0,  0,  0,  0,  0,
                                                                  -1, -1, -1, -1, -1, -1, -1, -1};

// Lanes [j, j + 8) of a row that lie before `len`.
inline __m256 valid_lanes(std::int64_t j, std::int64_t len) {
  const std::int64_t n = std::clamp<std::int64_t>(len - j, 0, kVector);
  return _mm256_castsi256_ps(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kOnesThenZeros + kVector - n)));
}

// Lanes (queries q0..q0+7) that attend key q0 + offset, 0 <= offset < 8: the causal mask of a
// diagonal vector.
inline __m256 causal_lanes(std::int64_t offset) {
  return _mm256_castsi256_ps(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kZerosThenOnes + kVector - offset)));
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

// C[rows × 8·NV] = alpha · A[R × k] · B[k × 8·NV], with A(r, p) = a[r·rs_a + p·cs_a] and B
// row-major; with a row_scale, row r of C is scaled by row_scale[r] instead of alpha. All R
// rows of A are read (they must be readable memory), only the first `rows` rows of C are
// written. AVX2 has no broadcast operand, so each row's A element takes a register.
template <int R, int NV, bool kGrad = false>
inline void tile(std::int64_t k, float alpha, const float* row_scale, const float* a,
                 std::int64_t rs_a, std::int64_t cs_a, const float* b, std::int64_t ldb, float* c,
                 std::int64_t ldc, std::int64_t rows, const SoftmaxGrad* grad = nullptr) {
  __m256 acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_setzero_ps();
  }
  for (std::int64_t p = 0; p < k; ++p) {
    __m256 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      __m256 loaded = _mm256_loadu_ps(b + p * ldb + kVector * v);
      // Pinned in a register: GCC otherwise folds the load into every row's FMA, which makes
      // 12 loads per 8 FMAs in a 4 x 16 tile, at the limit of Zen 3's 3 loads per cycle.
      // (Through a scalar: on the array element GCC stored it to the stack every step.)
      __asm__("" : "+x"(loaded));
      bv[v] = loaded;
    }
    const float* ap = a + p * cs_a;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_broadcast_ss(ap + r * rs_a);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
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
          _mm256_storeu_ps(p_row + kVector * v, _mm256_setzero_ps());
          _mm256_storeu_ps(g_row + kVector * v, _mm256_setzero_ps());
        }
        continue;
      }
      const __m256 shift = _mm256_set1_ps(grad->shift[r]);
      const __m256 delta = _mm256_set1_ps(grad->delta[r]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        const __m256 valid = valid_lanes(grad->first_key + kVector * v, i + 1);
        const __m256 prob = _mm256_and_ps(
            valid, vecmath::exp2_8(_mm256_sub_ps(_mm256_loadu_ps(p_row + kVector * v), shift)));
        _mm256_storeu_ps(p_row + kVector * v, prob);
        _mm256_storeu_ps(g_row + kVector * v,
                         _mm256_mul_ps(prob, _mm256_sub_ps(acc[r][v], delta)));
      }
    }
    return;
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    if (r >= rows) break;
    const __m256 scale = _mm256_set1_ps(row_scale != nullptr ? row_scale[r] : alpha);
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      _mm256_storeu_ps(c + r * ldc + kVector * v, _mm256_mul_ps(acc[r][v], scale));
    }
  }
}

template <int NV>
using Vectors = std::integral_constant<int, NV>;

// Calls tile_at(j, Vectors<NV>) for tiles covering columns [0, n), n a multiple of 8: tiles of
// 3 vectors where they fit, the rest in tiles of 2 rather than leaving one of a single vector,
// whose 4 accumulators cannot hide the FMA latency (hd 32 runs as 2 + 2, hd 64 as 3 + 3 + 2).
template <typename TileAt>
inline void across_columns(std::int64_t n, TileAt&& tile_at) {
  std::int64_t j = 0;
  while (n - j >= 5 * kVector || n - j == 3 * kVector) {
    tile_at(j, Vectors<3>{});
    j += 3 * kVector;
  }
  for (; n - j >= 2 * kVector; j += 2 * kVector) tile_at(j, Vectors<2>{});
  if (j < n) tile_at(j, Vectors<1>{});
}

// Which keys a causal mask lets a product skip when A's rows are the queries first_row..:
// keys run over k (B's rows) or over the columns of C (B's columns, as in Q·Kᵀ).
enum class Causal { none, keys_in_k, keys_in_columns };

// The keys a tile of kTileRows queries from `first_query` on attends: up to its last row's,
// rounded up to whole vectors when the keys are columns.
inline std::int64_t tile_keys(std::int64_t first_query) { return first_query + kTileRows; }
inline std::int64_t tile_key_columns(std::int64_t first_query) {
  return (tile_keys(first_query) + kVector - 1) / kVector * kVector;
}

// C[m × n] = alpha · A · B (or row i scaled by row_scale[i]) for m a multiple of 4 and n of
// 8; rows of C from `rows` on are not written (A must still be readable there). A causal
// product stops each tile of 4 rows after its last row's key (Causal): over k that skips half
// the products of the diagonal's tiles; over columns, the columns past the diagonal's vector
// are not written at all.
void product(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
             std::int64_t rs_a, std::int64_t cs_a, const float* b, std::int64_t ldb, float* c,
             std::int64_t ldc, std::int64_t rows, const float* row_scale = nullptr,
             Causal causal = Causal::none, std::int64_t first_row = 0) {
  for (std::int64_t i = 0; i < m && i < rows; i += kTileRows) {
    const float* ai = a + i * rs_a;
    const float* si = row_scale != nullptr ? row_scale + i : nullptr;
    float* ci = c + i * ldc;
    const std::int64_t valid = std::min(kTileRows, rows - i);
    const std::int64_t ki =
        causal == Causal::keys_in_k ? std::min(k, tile_keys(first_row + i)) : k;
    const std::int64_t ni =
        causal == Causal::keys_in_columns ? std::min(n, tile_key_columns(first_row + i)) : n;
    across_columns(ni, [&](std::int64_t j, auto vectors) {
      tile<kTileRows, decltype(vectors)::value>(ki, alpha, si, ai, rs_a, cs_a, b + j, ldb,
                                                ci + j, ldc, valid);
    });
  }
}

// dP = dO·Vᵀ over m rows (a multiple of 4) and the keys 0..n (n a multiple of 8), k = hd,
// finished as P and dS by the tiles (SoftmaxGrad) for all m rows. Like a causal product over
// columns, each tile of rows stops at the vector holding its last row's key: P and dS are
// written, zeros past the diagonal included, up to that vector and not beyond.
void product_grad(std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
                  std::int64_t lda, const float* b, std::int64_t ldb, const SoftmaxGrad& grad) {
  for (std::int64_t i = 0; i < m; i += kTileRows) {
    const std::int64_t ni = std::min(n, tile_key_columns(grad.first_query + i));
    across_columns(ni, [&](std::int64_t j, auto vectors) {
      SoftmaxGrad t = grad;
      t.p += i * grad.ld + j;
      t.g += i * grad.ld + j;
      t.shift += i;
      t.delta += i;
      t.first_query += i;
      t.first_key += j;
      tile<kTileRows, decltype(vectors)::value, true>(k, 1.0f, nullptr, a + i * lda, lda, 1,
                                                      b + j, ldb, nullptr, 0, kTileRows, &t);
    });
  }
}

// A pair's rows lie a row of qkv or y apart, which the hardware prefetcher does not follow
// (attention_tiled.cpp measured why): gathers touch rows this far ahead first.
constexpr std::int64_t kPrefetchRows = 8;

inline void prefetch_row(const float* row, std::int64_t floats) {
  for (std::int64_t c = 0; c < floats; c += kLineFloats) __builtin_prefetch(row + c, 0, 3);
}

inline void prefetch_ahead(const float* src, std::int64_t ld, std::int64_t i, std::int64_t seq,
                           std::int64_t hd) {
  if (i + kPrefetchRows < seq) prefetch_row(src + (i + kPrefetchRows) * ld, hd);
}

// dst[rows × hd] = the pair's rows, zero past seq (rows >= seq).
void copy_rows(const float* src, std::int64_t ld, std::int64_t seq, std::int64_t hd,
               float* dst, std::int64_t rows) {
  for (std::int64_t i = 0; i < std::min(kPrefetchRows, seq); ++i) prefetch_row(src + i * ld, hd);
  for (std::int64_t i = 0; i < seq; ++i) {
    prefetch_ahead(src, ld, i, seq, hd);
    for (std::int64_t c = 0; c < hd; c += kVector) {
      _mm256_storeu_ps(dst + i * hd + c, _mm256_loadu_ps(src + i * ld + c));
    }
  }
  std::fill(dst + seq * hd, dst + rows * hd, 0.0f);
}

// dst[hd × cols] = the pair's rows transposed, zero past seq (cols >= seq, a multiple of 8):
// 8 x 8 blocks through registers.
void copy_transposed(const float* src, std::int64_t ld, std::int64_t seq, std::int64_t hd,
                     float* dst, std::int64_t cols) {
  for (std::int64_t j = 0; j < std::min(kVector, seq); ++j) prefetch_row(src + j * ld, hd);
  for (std::int64_t j0 = 0; j0 < seq; j0 += kVector) {
    const std::int64_t rows = std::min(kVector, seq - j0);
    for (std::int64_t j = j0 + kVector; j < std::min(j0 + 2 * kVector, seq); ++j) {
      prefetch_row(src + j * ld, hd);
    }
    for (std::int64_t c0 = 0; c0 < hd; c0 += kVector) {
      __m256 r[kVector];
      for (std::int64_t i = 0; i < kVector; ++i) {
        r[i] = i < rows ? _mm256_loadu_ps(src + (j0 + i) * ld + c0) : _mm256_setzero_ps();
      }
      transpose8_in_registers(r);
      for (std::int64_t c = 0; c < kVector; ++c) {
        _mm256_storeu_ps(dst + (c0 + c) * cols + j0, r[c]);
      }
    }
  }
  const std::int64_t written = (seq + kVector - 1) / kVector * kVector;
  for (std::int64_t c = 0; c < hd; ++c) {
    std::fill(dst + c * cols + written, dst + (c + 1) * cols, 0.0f);
  }
}

// delta[i] = dot(dO_i, O_i) for every row, in one prefetched pass over O.
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
      for (std::int64_t c = 0; c < hd_; c += kLineFloats) {
        if (next_->written[m]) {
          __builtin_prefetch(row + c, 1, kLocality);
        } else {
          __builtin_prefetch(row + c, 0, kLocality);
        }
      }
    }
  }

 private:
  static constexpr int kLocality = 1;  // prefetcht2, as measured for attention_tiled.cpp
  const NextRows* next_;
  std::int64_t seq_, hd_;
  std::int64_t total_ = 0, per_step_ = 0, done_ = 0;
};

// The softmax of 8 queries q0..q0+7 held in the lanes of a column of Sᵀ (rows of `ld` floats,
// scores in log2 units): it runs down the keys 0..q0+7, so each query's max and sum build up
// lane-wise with no reduction across a vector. Leaves Pᵀ unnormalised, with zeros where a key
// follows the lane's query; writes 1/sum of all 8 lanes and lse[q] of the lanes' queries q
// below `seq`. Not inlined, as in attention_tiled.cpp, so that its running sum stays in a
// register.
[[gnu::noinline]] void softmax_lanes(float* col, std::int64_t ld, std::int64_t q0,
                                     float* inv_sums, float* lse, std::int64_t seq) {
  const std::int64_t keys = q0 + kVector;  // the last lane's query attends keys < keys
  __m256 max = _mm256_set1_ps(-INFINITY);
  for (std::int64_t j = 0; j < q0; ++j) max = _mm256_max_ps(max, _mm256_loadu_ps(col + j * ld));
  for (std::int64_t j = q0; j < keys; ++j) {
    const __m256 larger = _mm256_max_ps(max, _mm256_loadu_ps(col + j * ld));
    max = _mm256_blendv_ps(max, larger, causal_lanes(j - q0));
  }
  __m256 sum = _mm256_setzero_ps();
  for (std::int64_t j = 0; j < q0; ++j) {
    float* row = col + j * ld;
    const __m256 e = vecmath::exp2_8(_mm256_sub_ps(_mm256_loadu_ps(row), max));
    sum = _mm256_add_ps(sum, e);
    _mm256_storeu_ps(row, e);
  }
  for (std::int64_t j = q0; j < keys; ++j) {
    float* row = col + j * ld;
    const __m256 e = _mm256_and_ps(causal_lanes(j - q0),
                                   vecmath::exp2_8(_mm256_sub_ps(_mm256_loadu_ps(row), max)));
    sum = _mm256_add_ps(sum, e);
    _mm256_storeu_ps(row, e);
  }
  _mm256_storeu_ps(inv_sums, _mm256_div_ps(_mm256_set1_ps(1.0f), sum));
  alignas(32) float maxes[kVector];
  alignas(32) float sums[kVector];
  _mm256_store_ps(maxes, max);
  _mm256_store_ps(sums, sum);
  for (std::int64_t q = q0; q < seq; ++q) {
    lse[q] = maxes[q - q0] * kLn2 + std::log(sums[q - q0]);
  }
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

  alignas(32) float inv_sums[kQueryBlock];
  for (std::int64_t i0 = 0; i0 < seq; i0 += kQueryBlock) {
    // Sᵀ of keys 0..i0+15 against the block's queries; keys past i0+7 are masked for the
    // first 8 queries, so there only the second vector of queries is computed.
    product(i0 + kVector, kQueryBlock, hd, scale, k, hd, 1, qt + i0, rows, st, kQueryBlock,
            i0 + kVector);
    product(kVector, kVector, hd, scale, k + (i0 + kVector) * hd, hd, 1, qt + i0 + kVector, rows,
            st + (i0 + kVector) * kQueryBlock + kVector, kQueryBlock, kVector);
    for (std::int64_t part = 0; part < kQueryBlock / kVector; ++part) {
      prefetcher.step();
      const std::int64_t q0 = i0 + part * kVector;  // first query in the lanes
      softmax_lanes(st + part * kVector, kQueryBlock, q0, inv_sums + part * kVector, lse,
                    std::min(q0 + kVector, seq));
    }
    // O = Pᵀᵀ·V, each row scaled by its 1/sum: P stays unnormalised, which saves a pass.
    product(kQueryBlock, hd, i0 + kQueryBlock, 1.0f, st, 1, kQueryBlock, v, hd,
            y + i0 * pair.ld_out, pair.ld_out, seq - i0, inv_sums, Causal::keys_in_k, i0);
  }
}

void tiled_backward_pair(const PairView& pair, const float* dy, const float* y,
                         const float* lse, float* dq, float* dk, float* dv, float* scratch,
                         const NextRows* next) {
  const std::int64_t seq = pair.seq, hd = pair.hd, rows = padded(seq), ld_s = score_stride(seq);
  Prefetcher prefetcher(next, seq, hd, rows / kRowBlock * 4 + (seq + kTileRows - 1) / kTileRows);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  float* q = scratch;
  float* kt = q + rows * hd;
  float* d_out = kt + rows * hd;
  float* vt = d_out + rows * hd;
  float* probs = vt + rows * hd;
  float* grads = probs + rows * ld_s;
  float* delta = grads + rows * ld_s;
  float* k_rows = delta + rows;  // dS·K reads K by rows; packed for the same reason as V
  copy_rows(pair.q, pair.ld_qkv, seq, hd, q, rows);
  copy_rows(pair.k, pair.ld_qkv, seq, hd, k_rows, rows);
  copy_transposed(k_rows, hd, seq, hd, kt, rows);  // from the packed copy: K is gathered once
  copy_rows(dy, pair.ld_out, seq, hd, d_out, rows);
  copy_transposed(pair.v, pair.ld_qkv, seq, hd, vt, rows);
  row_deltas(d_out, y, pair.ld_out, seq, hd, delta);

  // Row blocks: P and dS of the lower triangle, and dQ, which needs only a block's own rows.
  alignas(32) float shifts[kRowBlock];
  for (std::int64_t i0 = 0; i0 < seq; i0 += kRowBlock) {
    const std::int64_t i1 = i0 + kRowBlock;
    float* p = probs + i0 * ld_s;
    float* g = grads + i0 * ld_s;
    for (std::int64_t r = 0; r < kRowBlock; ++r) {
      shifts[r] = i0 + r < seq ? lse[i0 + r] * kLog2e : 0.0f;
    }
    prefetcher.step();
    product(kRowBlock, i1, hd, scale * kLog2e, q + i0 * hd, hd, 1, kt, rows, p, ld_s, kRowBlock,
            nullptr, Causal::keys_in_columns, i0);
    prefetcher.step();
    product_grad(kRowBlock, i1, hd, d_out + i0 * hd, hd, vt, rows,
                 SoftmaxGrad{p, g, ld_s, shifts, delta + i0, i0, 0, seq});
    prefetcher.step();
    product(kRowBlock, hd, std::min(i1, seq), scale, g, ld_s, 1, k_rows, hd,
            dq + i0 * pair.ld_qkv, pair.ld_qkv, seq - i0, nullptr, Causal::keys_in_k, i0);
    prefetcher.step();
  }
  // Tiles of 4 keys: key j is attended by queries j..seq-1 only, and every such row of P and
  // dS holds zeros (not stale data) from its diagonal to the end of the vector holding its
  // 4-row tile's last key, which lies at or past this tile's last key because both tiles start
  // at multiples of 4.
  for (std::int64_t j0 = 0; j0 < seq; j0 += kTileRows) {
    const std::int64_t k = seq - j0;
    prefetcher.step();
    product(kTileRows, hd, k, scale, grads + j0 * ld_s + j0, 1, ld_s, q + j0 * hd, hd,
            dk + j0 * pair.ld_qkv, pair.ld_qkv, k);
    product(kTileRows, hd, k, 1.0f, probs + j0 * ld_s + j0, 1, ld_s, d_out + j0 * hd, hd,
            dv + j0 * pair.ld_qkv, pair.ld_qkv, k);
  }
}

}  // namespace spw::ops::attention_detail

#endif
