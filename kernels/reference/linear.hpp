// Reference Linear: the textbook formulas in plain loops, in float or double, for tests to
// check spw::ops::linear_* against. Layouts as in kernels/ops/linear.hpp (PyTorch's):
// x [rows, in], weight [out, in], bias [out], y [rows, out], all row-major. Shapes are the
// caller's responsibility.
#pragma once

#include <cstddef>
#include <cstdint>

namespace spw::ref {

// y = x · weightᵀ + bias; bias may be null.
template <class T>
void linear_forward(const T* x, const T* weight, const T* bias, T* y, std::int64_t rows,
                    std::int64_t in, std::int64_t out) {
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t o = 0; o < out; ++o) {
      T acc = bias != nullptr ? bias[o] : T(0);
      for (std::int64_t i = 0; i < in; ++i) acc += x[r * in + i] * weight[o * in + i];
      y[r * out + o] = acc;
    }
  }
}

// y = residual + x · weightᵀ + bias; bias may be null.
template <class T>
void linear_forward_residual(const T* x, const T* weight, const T* bias, const T* residual,
                             T* y, std::int64_t rows, std::int64_t in, std::int64_t out) {
  linear_forward(x, weight, bias, y, rows, in, out);
  for (std::int64_t k = 0; k < rows * out; ++k) y[k] += residual[k];
}

// dx = dy · weight, overwriting dx.
template <class T>
void linear_backward_input(const T* dy, const T* weight, T* dx, std::int64_t rows,
                           std::int64_t in, std::int64_t out) {
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t i = 0; i < in; ++i) {
      T acc = 0;
      for (std::int64_t o = 0; o < out; ++o) acc += dy[r * out + o] * weight[o * in + i];
      dx[r * in + i] = acc;
    }
  }
}

// dweight += dyᵀ · x and, if dbias is not null, dbias += the column sums of dy.
template <class T>
void linear_backward_weight(const T* dy, const T* x, T* dweight, T* dbias, std::int64_t rows,
                            std::int64_t in, std::int64_t out) {
  for (std::int64_t o = 0; o < out; ++o) {
    for (std::int64_t i = 0; i < in; ++i) {
      T acc = 0;
      for (std::int64_t r = 0; r < rows; ++r) acc += dy[r * out + o] * x[r * in + i];
      dweight[o * in + i] += acc;
    }
    if (dbias != nullptr) {
      T sum = 0;
      for (std::int64_t r = 0; r < rows; ++r) sum += dy[r * out + o];
      dbias[o] += sum;
    }
  }
}

}  // namespace spw::ref
