// Shared by op and runtime tests: seeded random data, normwise and elementwise comparison,
// and central finite differences in double precision.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "kernels/tensor.hpp"

namespace spw::testing {

inline std::vector<double> random_vector(std::size_t n, std::uint64_t seed, double lo = -1.0,
                                         double hi = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

template <class To, class From>
std::vector<To> cast_vector(const std::vector<From>& v) {
  return std::vector<To>(v.begin(), v.end());
}

// Random values already rounded to float, so a double reference sees exactly what an fp32 op
// sees.
inline std::vector<double> float_values(std::int64_t n, std::uint64_t seed, double lo = -1.0,
                                        double hi = 1.0) {
  return cast_vector<double>(
      cast_vector<float>(random_vector(static_cast<std::size_t>(n), seed, lo, hi)));
}

// A workspace tensor holding `values` (rounded to float).
inline Tensor tensor_from(const Shape& shape, const std::vector<double>& values) {
  auto t = Tensor::zeros(shape, MemoryCategory::workspace);
  EXPECT_TRUE(t.ok()) << t.status().message();
  Tensor tensor = std::move(t).value();
  EXPECT_EQ(static_cast<std::size_t>(tensor.numel()), values.size());
  for (std::size_t i = 0; i < values.size(); ++i) tensor.data()[i] = static_cast<float>(values[i]);
  return tensor;
}

inline Tensor zeros(const Shape& shape) {
  auto t = Tensor::zeros(shape, MemoryCategory::workspace);
  EXPECT_TRUE(t.ok()) << t.status().message();
  return std::move(t).value();
}

// A workspace tensor with every element `value`.
inline Tensor filled(const Shape& shape, float value) {
  Tensor t = zeros(shape);
  t.fill(value);
  return t;
}

inline bool bit_identical(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

// The largest |a[i] - b[i]| over the largest |b[i]|: how far two runs' values are apart for
// their scale (absolute where b is all zeros). Vectors of different sizes are infinitely far.
inline double max_relative(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

inline std::vector<double> to_double(const Tensor& t) {
  return std::vector<double>(t.data(), t.data() + t.numel());
}

// max |got - want| / max |want|: the normwise relative error, insensitive to summation order
// on elements that cancel to near zero.
template <class A, class B>
double normwise_error(const A& got, const B& want) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i])));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return scale == 0 ? diff : diff / scale;
}

inline ::testing::AssertionResult close_normwise(const std::vector<double>& got,
                                                 const std::vector<double>& want,
                                                 double tolerance) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << "sizes differ: " << got.size() << " vs " << want.size();
  }
  const double err = normwise_error(got, want);
  if (err <= tolerance) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "normwise relative error " << err << " > " << tolerance;
}

// d(loss)/d(x[i]) by central differences, loss evaluated in double. `x` is perturbed in
// place and restored.
inline std::vector<double> finite_difference(std::vector<double>& x,
                                             const std::function<double()>& loss,
                                             double h = 1e-6) {
  std::vector<double> grad(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double plus = loss();
    x[i] = saved - h;
    const double minus = loss();
    x[i] = saved;
    grad[i] = (plus - minus) / (2 * h);
  }
  return grad;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace spw::testing
