#include "runtime/grad_clip.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace spw {
namespace {

// Large enough that the parallel loop's overhead is small, and fixed, so that the same
// elements always land in the same block.
constexpr std::int64_t kBlock = 1 << 14;

}  // namespace

double squared_norm(const Tensor& t) {
  const float* g = t.data();
  const std::int64_t n = t.numel();
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> sums(static_cast<std::size_t>(blocks), 0.0);
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (std::int64_t b = 0; b < blocks; ++b) {
    // Eight running sums, element i into lane i % 8, added up in lane order at the end:
    // a fixed order, which the compiler can keep in vector registers.
    double lane[8] = {};
    const std::int64_t begin = b * kBlock;
    const std::int64_t end = std::min(n, begin + kBlock);
    std::int64_t i = begin;
    for (; i + 8 <= end; i += 8) {
      for (int k = 0; k < 8; ++k) {
        const double v = g[i + k];
        lane[k] += v * v;
      }
    }
    for (int k = 0; i < end; ++i, ++k) {
      const double v = g[i];
      lane[k] += v * v;
    }
    double sum = 0.0;
    for (double l : lane) sum += l;
    sums[static_cast<std::size_t>(b)] = sum;
  }
  double total = 0.0;
  for (double s : sums) total += s;
  return total;
}

float clip_coefficient(double norm, double max_norm) {
  if (!(max_norm > 0.0)) return 1.0f;
  const double coefficient = max_norm / (norm + 1e-6);
  return coefficient < 1.0 ? static_cast<float>(coefficient) : 1.0f;
}

void scale_gradients(std::span<const NamedParameter> parameters, float coefficient) {
  if (coefficient == 1.0f) return;
#pragma omp parallel
  for (const NamedParameter& p : parameters) {
    float* g = p.grad->data();
    const std::int64_t n = p.grad->numel();
#pragma omp for simd schedule(static) nowait
    for (std::int64_t i = 0; i < n; ++i) g[i] *= coefficient;
  }
}

}  // namespace spw
