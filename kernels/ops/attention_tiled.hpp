// Causal attention of one (batch, head) pair on register tiles instead of BLIS calls. At GPT
// head widths (hd 32-64, seq 128-256) a pair is a few dozen sgemm calls of 16-32 rows, and
// BLIS's per-call packing and setup took most of their time: attention ran at ~20 GFLOP/s per
// core against sgemm's ~100. Here every product is an AVX-512 (attention_tiled.cpp) or AVX2
// (attention_tiled_avx2.cpp) micro-kernel over operands copied once per pair into padded,
// transposed scratch.
#pragma once

#include <cstddef>
#include <cstdint>

namespace spw::ops::attention_detail {

// Whether this build has the tiled kernels and they cover a head width: hd a multiple of one
// vector register, 16 with AVX-512 (attention_tiled.cpp), 8 with AVX2 and FMA but no AVX-512
// (attention_tiled_avx2.cpp). Any sequence length is fine.
bool tiled_attention_fits(std::int64_t head_dim);

// Floats of scratch one thread needs for a pair.
std::size_t tiled_forward_scratch(std::int64_t seq, std::int64_t head_dim);
std::size_t tiled_backward_scratch(std::int64_t seq, std::int64_t head_dim);

// Layout of one pair inside qkv [batch*seq, 3d], y, dy [batch*seq, d] and lse: q, k, v and
// the outputs point at the pair's first row and head column; ld_* are the row strides.
struct PairView {
  std::int64_t seq = 0, hd = 0;
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  std::int64_t ld_qkv = 0;
  std::int64_t ld_out = 0;  // y, dy
};

// The rows of the pair a thread computes next (up to 8 matrices of seq rows × hd floats):
// they lie a qkv or y row apart, which the hardware prefetcher does not follow, so a pair
// requests them in slices while its own products run and finds its operands in cache when its
// turn comes. Only a hint: any pointers are fine, nothing is read or written through them.
struct NextRows {
  static constexpr int kMaxMatrices = 8;
  const float* rows[kMaxMatrices] = {};
  std::int64_t ld[kMaxMatrices] = {};
  bool written[kMaxMatrices] = {};  // the pair stores there: fetch the lines for writing
  int matrices = 0;
  void add(const float* first_row, std::int64_t stride, bool write) {
    rows[matrices] = first_row;
    ld[matrices] = stride;
    written[matrices] = write;
    ++matrices;
  }
};

// y rows of the pair (stride ld_out) and lse[seq]; same contract as attention_forward.
// `next` (may be null) is prefetched along the way.
void tiled_forward_pair(const PairView& pair, float* y, float* lse, float* scratch,
                        const NextRows* next);

// dq, dk, dv (stride ld_qkv) of the pair from dy, y and lse; same contract as
// attention_backward.
void tiled_backward_pair(const PairView& pair, const float* dy, const float* y,
                         const float* lse, float* dq, float* dk, float* dv, float* scratch,
                         const NextRows* next);

}  // namespace spw::ops::attention_detail
