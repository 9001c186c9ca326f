// Reference softmax cross-entropy with integer targets: plain loops in float or double, for
// tests to check spw::ops::cross_entropy_* and count_correct against. logits and dlogits are
// row-major [rows, classes]; targets holds one id in [0, classes) per row. Shapes and ids are
// the caller's responsibility.
#pragma once

#include <cmath>
#include <cstdint>

namespace spw::ref {

// log Σ_j exp(x[j]), shifted by the maximum so that large logits do not overflow.
template <class T>
T log_sum_exp(const T* x, std::int64_t n) {
  T max = x[0];
  for (std::int64_t j = 1; j < n; ++j) max = x[j] > max ? x[j] : max;
  T sum = 0;
  for (std::int64_t j = 0; j < n; ++j) sum += std::exp(x[j] - max);
  return max + std::log(sum);
}

// Mean over rows of -log softmax(logits)[target].
template <class T>
T cross_entropy_forward(const T* logits, const std::int32_t* targets, std::int64_t rows,
                        std::int64_t classes) {
  T total = 0;
  for (std::int64_t i = 0; i < rows; ++i) {
    const T* x = logits + i * classes;
    total += log_sum_exp(x, classes) - x[targets[i]];
  }
  return total / static_cast<T>(rows);
}

// dlogits = grad_scale (softmax(logits) - onehot(target)), overwritten.
template <class T>
void cross_entropy_backward(const T* logits, const std::int32_t* targets, std::int64_t rows,
                            std::int64_t classes, T grad_scale, T* dlogits) {
  for (std::int64_t i = 0; i < rows; ++i) {
    const T* x = logits + i * classes;
    const T lse = log_sum_exp(x, classes);
    for (std::int64_t j = 0; j < classes; ++j) {
      const T onehot = j == targets[i] ? T(1) : T(0);
      dlogits[i * classes + j] = grad_scale * (std::exp(x[j] - lse) - onehot);
    }
  }
}

// Rows whose first largest logit is the target.
template <class T>
std::int64_t count_correct(const T* logits, const std::int32_t* targets, std::int64_t rows,
                           std::int64_t classes) {
  std::int64_t correct = 0;
  for (std::int64_t i = 0; i < rows; ++i) {
    const T* x = logits + i * classes;
    std::int64_t arg = 0;
    for (std::int64_t j = 1; j < classes; ++j) {
      if (x[j] > x[arg]) arg = j;
    }
    if (arg == targets[i]) ++correct;
  }
  return correct;
}

}  // namespace spw::ref
