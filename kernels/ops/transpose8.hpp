// An 8 x 8 float block transposed in AVX2 registers: 24 shuffles instead of 64 scalar moves
// with strided stores. transpose16.hpp's counterpart for CPUs without AVX-512 (attention's Kᵀ,
// Qᵀ and Vᵀ in attention_tiled_avx2.cpp).
#pragma once

#if defined(__AVX2__)
#include <immintrin.h>

namespace spw::ops {

// r[i] (row i of the block) becomes column i: interleave 32-bit elements, then 64-bit pairs,
// within 128-bit lanes, then swap the off-diagonal lanes of the 2 x 2 grid of 4 x 4 blocks.
inline void transpose8_in_registers(__m256 r[8]) {
  __m256 t[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  // u[4g + k]: rows 4g..4g+3 of column k in the low lane, of column k + 4 in the high lane.
  __m256 u[8];
  for (int g = 0; g < 8; g += 4) {
    u[g] = _mm256_shuffle_ps(t[g], t[g + 2], 0x44);
    u[g + 1] = _mm256_shuffle_ps(t[g], t[g + 2], 0xEE);
    u[g + 2] = _mm256_shuffle_ps(t[g + 1], t[g + 3], 0x44);
    u[g + 3] = _mm256_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
  }
  for (int k = 0; k < 4; ++k) {
    r[k] = _mm256_permute2f128_ps(u[k], u[4 + k], 0x20);
    r[4 + k] = _mm256_permute2f128_ps(u[k], u[4 + k], 0x31);
  }
}

}  // namespace spw::ops

#endif
