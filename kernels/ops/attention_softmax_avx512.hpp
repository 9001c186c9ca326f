// The softmax rows of causal attention on AVX-512 registers, for the register-tiled kernels
// (attention_tiled.cpp). A row's valid length runs 1..seq, so the generic loops of
// attention_softmax.hpp spent much of their time in scalar epilogues and reductions; here
// every row is whole vectors up to its block's padded width, the tail handled by masks.
// Same formulas as attention_softmax.hpp, but on scores in log2 units and with exp2_16.
#pragma once

#if defined(__AVX512F__)
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/vecmath_avx512.hpp"

namespace spw::ops::attention_detail {

// GCC 12 warns falsely that the intrinsics' undefined pass-through operands may be used
// uninitialized (GCC bug 105593, fixed in 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// Lanes [j, j + 16) of a row that lie before `len`.
inline __mmask16 valid_lanes(std::int64_t j, std::int64_t len) {
  const std::int64_t n = len - j;
  return n >= 16 ? static_cast<__mmask16>(0xFFFF)
                 : n <= 0 ? static_cast<__mmask16>(0)
                          : static_cast<__mmask16>((1u << n) - 1u);
}

// softmax_backward_row for rows of `width` floats (a multiple of 16), with the scores in p and
// the shift both in log2 units (multiplied by log2 e): p = 2^(p - shift2).
inline void softmax_backward_row16(float* p, float* g, std::int64_t len, std::int64_t width,
                                   float shift2, float delta) {
  const __m512 shift = _mm512_set1_ps(shift2);
  const __m512 d = _mm512_set1_ps(delta);
  for (std::int64_t j = 0; j < width; j += 16) {
    const __mmask16 valid = valid_lanes(j, len);
    const __m512 prob = _mm512_maskz_mov_ps(
        valid, vecmath::exp2_16(_mm512_sub_ps(_mm512_loadu_ps(p + j), shift)));
    _mm512_storeu_ps(p + j, prob);
    _mm512_storeu_ps(g + j, _mm512_mul_ps(prob, _mm512_sub_ps(_mm512_loadu_ps(g + j), d)));
  }
}

#pragma GCC diagnostic pop

}  // namespace spw::ops::attention_detail

#endif
