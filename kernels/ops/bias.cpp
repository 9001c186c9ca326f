#include "kernels/ops/bias.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "kernels/op_timer.hpp"
#include "kernels/threading.hpp"

namespace spw::ops {

namespace {

// Column sums keep one double accumulator per column of a tile on the stack: 512 of them are
// 4 KiB, which stays in L1 while the rows stream past.
constexpr std::int64_t kMaxTile = 512;
// Tiles are whole cache lines of floats, so no two threads write the same line of dbias.
constexpr std::int64_t kLineFloats = 16;

Status check_bias(const char* op, const char* matrix_name, const Tensor& matrix,
                  const char* bias_name, const Tensor& bias) {
  const Shape want{matrix.shape().cols()};
  if (matrix.rank() < 2 || !(bias.shape() == want)) {
    const std::string why = matrix.rank() < 2
                                ? std::string(matrix_name) + " must be a matrix [rows, cols]"
                                : "expected " + want.to_string();
    return error(StatusCode::shape_mismatch,
                 std::string(op) + ": " + bias_name + " " + bias.shape().to_string() +
                     " does not fit " + matrix_name + " " + matrix.shape().to_string() +
                     ": " + why);
  }
  for (const auto& [name, t] : {std::pair{matrix_name, &matrix}, std::pair{bias_name, &bias}}) {
    if (t->numel() > 0 && t->data() == nullptr) {
      return error(StatusCode::invalid_argument, std::string(op) + ": " + name + " " +
                                                     t->shape().to_string() + " has no data");
    }
  }
  const auto* m = reinterpret_cast<const unsigned char*>(matrix.data());
  const auto* b = reinterpret_cast<const unsigned char*>(bias.data());
  if (m < b + bias.bytes() && b < m + matrix.bytes()) {
    return error(StatusCode::invalid_argument,
                 std::string(op) + ": " + bias_name + " " + bias.shape().to_string() +
                     " overlaps " + matrix_name + " " + matrix.shape().to_string());
  }
  return Status::success();
}

}  // namespace

Status bias_forward(Tensor& y, const Tensor& bias) {
  const OpTimer timer(KernelOp::bias_forward);
  SPW_TRY(check_bias("bias_forward", "y", y, "bias", bias));
  const std::int64_t rows = y.shape().rows();
  const std::int64_t cols = y.shape().cols();
  if (rows == 0 || cols == 0) return Status::success();
  float* out = y.data();
  const float* b = bias.data();
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    float* row = out + r * cols;
#pragma omp simd
    for (std::int64_t c = 0; c < cols; ++c) row[c] += b[c];
  }
  return Status::success();
}

Status bias_backward_weight(const Tensor& dy, Tensor& dbias) {
  const OpTimer timer(KernelOp::bias_backward_weight);
  SPW_TRY(check_bias("bias_backward_weight", "dy", dy, "dbias", dbias));
  const std::int64_t rows = dy.shape().rows();
  const std::int64_t cols = dy.shape().cols();
  if (rows == 0 || cols == 0) return Status::success();
  // Parallel over column tiles rather than per-thread partial sums over rows: every column is
  // then summed in row order whatever the thread count, so the result never changes. Double
  // accumulators keep a sum over thousands of rows accurate.
  const std::int64_t threads = std::max(compute_threads(), 1);
  const std::int64_t share = (cols + threads - 1) / threads;
  const std::int64_t tile =
      std::min(kMaxTile, (share + kLineFloats - 1) / kLineFloats * kLineFloats);
  const std::int64_t tiles = (cols + tile - 1) / tile;
  const float* in = dy.data();
  float* db = dbias.data();
#pragma omp parallel for schedule(static)
  for (std::int64_t t = 0; t < tiles; ++t) {
    const std::int64_t begin = t * tile;
    const std::int64_t width = std::min(tile, cols - begin);
    double acc[kMaxTile];
#pragma omp simd
    for (std::int64_t c = 0; c < width; ++c) acc[c] = 0.0;
    // Eight rows are added in float, then the partial joins the column's double: a double
    // conversion and add per element kept the pass at ~10 GB/s, compute-bound, on one thread.
    // Each column still adds its rows in order, and a partial of eight floats is off by a few
    // ulp at most before the long sum, which stays in double.
    constexpr std::int64_t kRowsPerPartial = 8;
    std::int64_t r = 0;
    for (; r + kRowsPerPartial <= rows; r += kRowsPerPartial) {
      const float* row = in + r * cols + begin;
#pragma omp simd
      for (std::int64_t c = 0; c < width; ++c) {
        float partial = row[c];
#pragma GCC unroll 8
        for (std::int64_t k = 1; k < kRowsPerPartial; ++k) partial += row[c + k * cols];
        acc[c] += static_cast<double>(partial);
      }
    }
    for (; r < rows; ++r) {
      const float* row = in + r * cols + begin;
#pragma omp simd
      for (std::int64_t c = 0; c < width; ++c) acc[c] += static_cast<double>(row[c]);
    }
#pragma omp simd
    for (std::int64_t c = 0; c < width; ++c) {
      db[begin + c] = static_cast<float>(static_cast<double>(db[begin + c]) + acc[c]);
    }
  }
  return Status::success();
}

}  // namespace spw::ops
