// Reference LayerNorm over the last dimension: the textbook formulas in plain loops, in float
// or double, for tests to check spw::ops::layernorm_* against. x, y, dy, dx are row-major
// [rows, d]; gamma, beta, dgamma, dbeta are [d]; mean and rstd are [rows]. Shapes are the
// caller's responsibility.
#pragma once

#include <cmath>
#include <cstdint>

namespace spw::ref {

template <class T>
void layernorm_forward(const T* x, const T* gamma, const T* beta, std::int64_t rows,
                       std::int64_t d, T eps, T* y, T* mean, T* rstd) {
  for (std::int64_t i = 0; i < rows; ++i) {
    const T* xr = x + i * d;
    T m = 0;
    for (std::int64_t j = 0; j < d; ++j) m += xr[j];
    m /= static_cast<T>(d);
    T var = 0;
    for (std::int64_t j = 0; j < d; ++j) var += (xr[j] - m) * (xr[j] - m);
    var /= static_cast<T>(d);
    const T rs = T(1) / std::sqrt(var + eps);
    for (std::int64_t j = 0; j < d; ++j) y[i * d + j] = (xr[j] - m) * rs * gamma[j] + beta[j];
    mean[i] = m;
    rstd[i] = rs;
  }
}

// dx is overwritten: dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dy gamma.
template <class T>
void layernorm_backward_input(const T* dy, const T* x, const T* gamma, const T* mean,
                              const T* rstd, std::int64_t rows, std::int64_t d, T* dx) {
  for (std::int64_t i = 0; i < rows; ++i) {
    T mean_g = 0;
    T mean_gx = 0;
    for (std::int64_t j = 0; j < d; ++j) {
      const T g = dy[i * d + j] * gamma[j];
      const T xhat = (x[i * d + j] - mean[i]) * rstd[i];
      mean_g += g;
      mean_gx += g * xhat;
    }
    mean_g /= static_cast<T>(d);
    mean_gx /= static_cast<T>(d);
    for (std::int64_t j = 0; j < d; ++j) {
      const T g = dy[i * d + j] * gamma[j];
      const T xhat = (x[i * d + j] - mean[i]) * rstd[i];
      dx[i * d + j] = rstd[i] * (g - mean_g - xhat * mean_gx);
    }
  }
}

// dgamma and dbeta are accumulated into (+=), like the optimized op.
template <class T>
void layernorm_backward_weight(const T* dy, const T* x, const T* mean, const T* rstd,
                               std::int64_t rows, std::int64_t d, T* dgamma, T* dbeta) {
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < d; ++j) {
      const T xhat = (x[i * d + j] - mean[i]) * rstd[i];
      dgamma[j] += dy[i * d + j] * xhat;
      dbeta[j] += dy[i * d + j];
    }
  }
}

}  // namespace spw::ref
