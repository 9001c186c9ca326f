// Reference element-wise ops (bias, GELU, ReLU, residual): the textbook formulas in plain
// loops, in float or double, for tests to check the spw::ops versions against. Matrices are
// row-major [rows, cols]; flat arrays hold n elements. Shapes are the caller's responsibility.
#pragma once

#include <cmath>
#include <cstdint>

namespace spw::ref {

// y[r, c] += bias[c], in place.
template <class T>
void bias_forward(T* y, const T* bias, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) y[r * cols + c] += bias[c];
  }
}

// dbias[c] += Σ_r dy[r, c].
template <class T>
void bias_backward_weight(const T* dy, T* dbias, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t c = 0; c < cols; ++c) {
    T sum = 0;
    for (std::int64_t r = 0; r < rows; ++r) sum += dy[r * cols + c];
    dbias[c] += sum;
  }
}

// y = x Φ(x) = 0.5 x (1 + erf(x / √2)), the exact GELU, written with erfc(-x / √2) for
// 1 + erf(x / √2): the same function, without the cancellation that leaves the left tail
// (x Φ(x) = -7.6e-23 at x = -10) zero even in double.
template <class T>
void gelu_forward(const T* x, T* y, std::int64_t n) {
  const T inv_sqrt2 = T(1) / std::sqrt(T(2));
  for (std::int64_t i = 0; i < n; ++i) y[i] = T(0.5) * x[i] * std::erfc(-x[i] * inv_sqrt2);
}

// dx = dy (Φ(x) + x φ(x)), φ the standard normal density.
template <class T>
void gelu_backward(const T* dy, const T* x, T* dx, std::int64_t n) {
  const T inv_sqrt2 = T(1) / std::sqrt(T(2));
  const T inv_sqrt_2pi = T(1) / std::sqrt(T(2) * T(3.14159265358979323846));
  for (std::int64_t i = 0; i < n; ++i) {
    const T cdf = T(0.5) * (T(1) + std::erf(x[i] * inv_sqrt2));
    const T pdf = inv_sqrt_2pi * std::exp(T(-0.5) * x[i] * x[i]);
    dx[i] = dy[i] * (cdf + x[i] * pdf);
  }
}

template <class T>
void relu_forward(const T* x, T* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] > T(0) ? x[i] : T(0);
}

// The subgradient at 0 is taken as 0, as PyTorch does.
template <class T>
void relu_backward(const T* dy, const T* x, T* dx, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dx[i] = x[i] > T(0) ? dy[i] : T(0);
}

// y = a + b.
template <class T>
void residual_forward(const T* a, const T* b, T* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

// dst += src.
template <class T>
void accumulate(T* dst, const T* src, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace spw::ref
