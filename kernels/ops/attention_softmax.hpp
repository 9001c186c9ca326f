// The row-wise softmax steps of causal attention, shared by the BLIS and the register-tiled
// implementations (attention.cpp, attention_tiled.cpp) so both round the same way.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/vecmath.hpp"

namespace spw::ops::attention_detail {

// Turns the first `len` scaled scores of a row into probabilities, zeroes the masked tail up
// to `width` (so the P·V product over the block's columns ignores it) and returns the row's
// log-sum-exp.
inline float softmax_row(float* row, std::int64_t len, std::int64_t width) {
  float max = row[0];
#pragma omp simd reduction(max : max)
  for (std::int64_t j = 0; j < len; ++j) max = row[j] > max ? row[j] : max;
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (std::int64_t j = 0; j < len; ++j) {
    const float p = vecmath::exp(row[j] - max);
    row[j] = p;
    sum += p;
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (std::int64_t j = 0; j < len; ++j) row[j] *= inv;
  std::fill(row + len, row + width, 0.0f);
  return max + std::log(sum);
}

// dot(dO_i, O_i): the term the softmax backward subtracts from every dP of row i.
inline float row_delta(const float* d_out, const float* out, std::int64_t hd) {
  float delta = 0.0f;
#pragma omp simd reduction(+ : delta)
  for (std::int64_t c = 0; c < hd; ++c) delta += d_out[c] * out[c];
  return delta;
}

// p holds scaled scores and g holds dP = dO·Vᵀ on entry; on exit p = exp(s - lse) and
// g = p ⊙ (dP - delta), both zero past the diagonal up to `width`.
inline void softmax_backward_row(float* p, float* g, std::int64_t len, std::int64_t width,
                                 float lse, float delta) {
#pragma omp simd
  for (std::int64_t j = 0; j < len; ++j) {
    const float prob = vecmath::exp(p[j] - lse);
    p[j] = prob;
    g[j] = prob * (g[j] - delta);
  }
  std::fill(p + len, p + width, 0.0f);
  std::fill(g + len, g + width, 0.0f);
}

inline void softmax_backward_row(float* p, float* g, std::int64_t len, std::int64_t width,
                                 float lse, const float* d_out, const float* out,
                                 std::int64_t hd) {
  softmax_backward_row(p, g, len, width, lse, row_delta(d_out, out, hd));
}

}  // namespace spw::ops::attention_detail
