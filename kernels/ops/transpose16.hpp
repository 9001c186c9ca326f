// A 16 x 16 float block transposed in AVX-512 registers: 64 shuffles instead of 256 scalar
// moves with strided stores. Used where a kernel needs an operand the other way round
// (attention's Kᵀ and Vᵀ, a weight gradient computed transposed).
#pragma once

#if defined(__AVX512F__)
#include <immintrin.h>

#include <cstdint>

namespace spw::ops {

// GCC 12 warns falsely that the intrinsics' undefined pass-through operands may be used
// uninitialized (GCC bug 105593, fixed in 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// r[i] (row i of the block) becomes column i: interleave 32-bit then 64-bit elements within
// 128-bit lanes, then transpose the 4 x 4 grid of lanes.
inline void transpose16_in_registers(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  // u[4g + k], lane L: rows 4g..4g+3 of column 4L + k.
  __m512 u[16];
  for (int g = 0; g < 16; g += 4) {
    const __m512d t0 = _mm512_castps_pd(t[g]), t1 = _mm512_castps_pd(t[g + 1]);
    const __m512d t2 = _mm512_castps_pd(t[g + 2]), t3 = _mm512_castps_pd(t[g + 3]);
    u[g] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
    u[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
    u[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
    u[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
  }
  for (int k = 0; k < 4; ++k) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0x44);
    const __m512 v1 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0xEE);
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0x44);
    const __m512 v3 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0xEE);
    r[k] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    r[4 + k] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
    r[8 + k] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    r[12 + k] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
  }
}

#pragma GCC diagnostic pop

}  // namespace spw::ops

#endif
