#include "kernels/ops/cross_entropy.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>

#include "kernels/op_timer.hpp"
#include "kernels/threading.hpp"
#include "kernels/vecmath.hpp"

namespace spw::ops {

namespace {

// The loss is summed per block of rows and the block sums are added in order. Blocks depend
// only on the row count, never on the thread count, so the loss is bit-identical for any
// thread count; at most kMaxBlocks of them keeps the partial sums on the stack.
constexpr std::int64_t kMinBlockRows = 64;
constexpr std::int64_t kMaxBlocks = 1024;

// A tensor with elements but no memory (a borrowed null pointer) would crash the loops.
Status check_data(const char* op, const char* name, const Tensor& t) {
  if (t.numel() > 0 && t.data() == nullptr) {
    return error(StatusCode::invalid_argument,
                 std::string(op) + ": " + name + " " + t.shape().to_string() + " has no data");
  }
  return Status::success();
}

Status check_logits(const char* op, const Tensor& logits, std::span<const std::int32_t> targets) {
  const std::int64_t rows = logits.shape().rows();
  const std::int64_t classes = logits.shape().cols();
  if (logits.rank() < 2 || rows < 1 || classes < 1) {
    return error(StatusCode::shape_mismatch,
                 std::string(op) + ": logits " + logits.shape().to_string() +
                     " is not a matrix [rows, classes] with rows and classes >= 1");
  }
  if (static_cast<std::int64_t>(targets.size()) != rows) {
    return error(StatusCode::shape_mismatch,
                 std::string(op) + ": targets [" + std::to_string(targets.size()) +
                     "] does not fit logits " + logits.shape().to_string() + ": expected [" +
                     std::to_string(rows) + "]");
  }
  SPW_TRY(check_data(op, "logits", logits));
  const std::int32_t* t = targets.data();
  // A vectorised range check first; the scalar search for the culprit runs only on failure.
  std::int32_t lo = 0;
  std::int32_t hi = 0;
#pragma omp simd reduction(min : lo) reduction(max : hi)
  for (std::int64_t i = 0; i < rows; ++i) {
    lo = std::min(lo, t[i]);
    hi = std::max(hi, t[i]);
  }
  if (lo >= 0 && hi < classes) return Status::success();
  for (std::int64_t i = 0; i < rows; ++i) {
    if (t[i] < 0 || t[i] >= classes) {
      return error(StatusCode::invalid_argument,
                   std::string(op) + ": target " + std::to_string(t[i]) + " at row " +
                       std::to_string(i) + " is out of range [0, " + std::to_string(classes) +
                       ") of logits " + logits.shape().to_string());
    }
  }
  return Status::success();
}

inline float row_max(const float* x, std::int64_t n) {
  float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
  for (std::int64_t j = 0; j < n; ++j) mx = x[j] > mx ? x[j] : mx;
  return mx;
}

}  // namespace

Status cross_entropy_forward(const Tensor& logits, std::span<const std::int32_t> targets,
                             float& loss) {
  const OpTimer timer(KernelOp::cross_entropy_forward);
  SPW_TRY(check_logits("cross_entropy_forward", logits, targets));
  const std::int64_t rows = logits.shape().rows();
  const std::int64_t classes = logits.shape().cols();
  const std::int64_t block_rows =
      std::max(kMinBlockRows, (rows + kMaxBlocks - 1) / kMaxBlocks);
  const std::int64_t blocks = (rows + block_rows - 1) / block_rows;
  const float* x = logits.data();
  const std::int32_t* t = targets.data();
  double block_sum[kMaxBlocks];

#pragma omp parallel for schedule(static) num_threads(compute_threads())
  for (std::int64_t blk = 0; blk < blocks; ++blk) {
    const std::int64_t end = std::min(rows, (blk + 1) * block_rows);
    double sum = 0.0;
    for (std::int64_t i = blk * block_rows; i < end; ++i) {
      const float* xr = x + i * classes;
      const float mx = row_max(xr, classes);
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (std::int64_t j = 0; j < classes; ++j) s += vecmath::exp(xr[j] - mx);
      // -log softmax[t] = log Σ exp(x - max) + max - x[t]; s >= 1, so the log is finite.
      sum += static_cast<double>(std::log(s) + (mx - xr[t[i]]));
    }
    block_sum[blk] = sum;
  }

  double total = 0.0;
  for (std::int64_t blk = 0; blk < blocks; ++blk) total += block_sum[blk];
  loss = static_cast<float>(total / static_cast<double>(rows));
  return Status::success();
}

Status cross_entropy_backward(const Tensor& logits, std::span<const std::int32_t> targets,
                              float grad_scale, Tensor& dlogits) {
  const OpTimer timer(KernelOp::cross_entropy_backward);
  constexpr const char* kOp = "cross_entropy_backward";
  SPW_TRY(check_logits(kOp, logits, targets));
  const std::int64_t rows = logits.shape().rows();
  const std::int64_t classes = logits.shape().cols();
  if (dlogits.rank() < 2 || dlogits.shape().rows() != rows ||
      dlogits.shape().cols() != classes) {
    return error(StatusCode::shape_mismatch,
                 std::string(kOp) + ": dlogits " + dlogits.shape().to_string() +
                     " does not fit logits " + logits.shape().to_string() + ": expected " +
                     Shape{rows, classes}.to_string());
  }
  SPW_TRY(check_data(kOp, "dlogits", dlogits));
  if (!std::isfinite(grad_scale)) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", static_cast<double>(grad_scale));
    return error(StatusCode::invalid_argument,
                 std::string(kOp) + ": grad_scale " + text + " is not finite");
  }
  const float* x = logits.data();
  const std::int32_t* t = targets.data();
  float* dx = dlogits.data();

#pragma omp parallel for schedule(static) num_threads(compute_threads())
  for (std::int64_t i = 0; i < rows; ++i) {
    const float* xr = x + i * classes;
    float* dr = dx + i * classes;
    const float mx = row_max(xr, classes);
    // The exponentials are stored in place of the gradient and scaled once the sum is known:
    // exp is computed once per element, and logits may be dlogits because each element is
    // read before it is written.
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (std::int64_t j = 0; j < classes; ++j) {
      const float e = vecmath::exp(xr[j] - mx);
      dr[j] = e;
      s += e;
    }
    const float k = grad_scale / s;
#pragma omp simd
    for (std::int64_t j = 0; j < classes; ++j) dr[j] *= k;
    dr[t[i]] -= grad_scale;
  }
  return Status::success();
}

Status count_correct(const Tensor& logits, std::span<const std::int32_t> targets,
                     std::int64_t& correct) {
  const OpTimer timer(KernelOp::count_correct);
  SPW_TRY(check_logits("count_correct", logits, targets));
  const std::int64_t rows = logits.shape().rows();
  const std::int64_t classes = logits.shape().cols();
  const float* x = logits.data();
  const std::int32_t* t = targets.data();
  std::int64_t count = 0;

  // An integer sum: the same for any order of combination, hence deterministic.
#pragma omp parallel for schedule(static) reduction(+ : count) num_threads(compute_threads())
  for (std::int64_t i = 0; i < rows; ++i) {
    const float* xr = x + i * classes;
    const float mx = row_max(xr, classes);
    // The first position of the maximum is the argmax (a NaN row has none and counts wrong).
    std::int64_t arg = 0;
    while (arg < classes && !(xr[arg] == mx)) ++arg;
    count += arg == t[i] ? 1 : 0;
  }
  correct = count;
  return Status::success();
}

}  // namespace spw::ops
