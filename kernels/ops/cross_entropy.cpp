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

// The loss is summed per block of rows (add_row_losses); at most kMaxBlocks of them keeps the
// partial sums on the stack.
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

Status check_dlogits(const char* op, const Tensor& logits, const Tensor& dlogits,
                     float grad_scale) {
  const std::int64_t rows = logits.shape().rows();
  const std::int64_t classes = logits.shape().cols();
  if (dlogits.rank() < 2 || dlogits.shape().rows() != rows || dlogits.shape().cols() != classes) {
    return error(StatusCode::shape_mismatch,
                 std::string(op) + ": dlogits " + dlogits.shape().to_string() +
                     " does not fit logits " + logits.shape().to_string() + ": expected " +
                     Shape{rows, classes}.to_string());
  }
  SPW_TRY(check_data(op, "dlogits", dlogits));
  if (!std::isfinite(grad_scale)) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", static_cast<double>(grad_scale));
    return error(StatusCode::invalid_argument,
                 std::string(op) + ": grad_scale " + text + " is not finite");
  }
  return Status::success();
}

// -log softmax(x)[target] of one row: log Σ exp(x - max) + max - x[target], where the sum
// s >= 1 keeps the log finite. With `dx` the row's gradient grad_scale · (softmax(x) -
// onehot(target)) is written too: the exponentials go into dx and are scaled once their sum
// is known, so exp runs once per element, and dx may be x since each element is read before
// it is written.
inline double row_loss(const float* x, std::int64_t classes, std::int32_t target, float* dx,
                       float grad_scale) {
  const float mx = row_max(x, classes);
  const float at_target = x[target];  // read before dx, which may be x, overwrites it
  float s = 0.0f;
  if (dx == nullptr) {
#pragma omp simd reduction(+ : s)
    for (std::int64_t j = 0; j < classes; ++j) s += vecmath::exp(x[j] - mx);
  } else {
#pragma omp simd reduction(+ : s)
    for (std::int64_t j = 0; j < classes; ++j) {
      const float e = vecmath::exp(x[j] - mx);
      dx[j] = e;
      s += e;
    }
    const float k = grad_scale / s;
#pragma omp simd
    for (std::int64_t j = 0; j < classes; ++j) dx[j] *= k;
    dx[target] -= grad_scale;
  }
  return static_cast<double>(std::log(s) + (mx - at_target));
}

// Adds the rows' losses to `sum` one block of rows at a time, in order. Blocks depend only
// on the row count, never on the thread count, so the sum is bit-identical for any thread
// count, and rows handed over in pieces of whole blocks (a multiple of kMinBlockRows, at most
// kMinBlockRows * kMaxBlocks rows in all) add up to the bits of the rows handed over at once.
// With `dlogits`, writes the gradient too (cross_entropy_loss_and_gradient).
// The caller has checked logits, targets and dlogits.
void add_row_losses(const Tensor& logits, std::span<const std::int32_t> targets, Tensor* dlogits,
                    float grad_scale, double& sum) {
  const std::int64_t rows = logits.shape().rows();
  const std::int64_t classes = logits.shape().cols();
  const std::int64_t block_rows =
      std::max(kMinBlockRows, (rows + kMaxBlocks - 1) / kMaxBlocks);
  const std::int64_t blocks = (rows + block_rows - 1) / block_rows;
  const float* x = logits.data();
  float* dx = dlogits != nullptr ? dlogits->data() : nullptr;
  const std::int32_t* t = targets.data();
  double block_sum[kMaxBlocks];

#pragma omp parallel for schedule(static) num_threads(compute_threads())
  for (std::int64_t blk = 0; blk < blocks; ++blk) {
    const std::int64_t end = std::min(rows, (blk + 1) * block_rows);
    double block_total = 0.0;
    for (std::int64_t i = blk * block_rows; i < end; ++i) {
      block_total += row_loss(x + i * classes, classes, t[i],
                              dx != nullptr ? dx + i * classes : nullptr, grad_scale);
    }
    block_sum[blk] = block_total;
  }
  for (std::int64_t blk = 0; blk < blocks; ++blk) sum += block_sum[blk];
}

}  // namespace

Status cross_entropy_forward(const Tensor& logits, std::span<const std::int32_t> targets,
                             float& loss) {
  const OpTimer timer(KernelOp::cross_entropy_forward);
  SPW_TRY(check_logits("cross_entropy_forward", logits, targets));
  double total = 0.0;
  add_row_losses(logits, targets, nullptr, 0.0f, total);
  loss = static_cast<float>(total / static_cast<double>(logits.shape().rows()));
  return Status::success();
}

Status cross_entropy_add_loss(const Tensor& logits, std::span<const std::int32_t> targets,
                              double& loss_sum) {
  const OpTimer timer(KernelOp::cross_entropy_forward);
  SPW_TRY(check_logits("cross_entropy_add_loss", logits, targets));
  add_row_losses(logits, targets, nullptr, 0.0f, loss_sum);
  return Status::success();
}

Status cross_entropy_loss_and_gradient(const Tensor& logits, std::span<const std::int32_t> targets,
                                       float grad_scale, Tensor& dlogits, double& loss_sum) {
  const OpTimer timer(KernelOp::cross_entropy_loss_and_gradient);
  constexpr const char* kOp = "cross_entropy_loss_and_gradient";
  SPW_TRY(check_logits(kOp, logits, targets));
  SPW_TRY(check_dlogits(kOp, logits, dlogits, grad_scale));
  add_row_losses(logits, targets, &dlogits, grad_scale, loss_sum);
  return Status::success();
}

Status cross_entropy_backward(const Tensor& logits, std::span<const std::int32_t> targets,
                              float grad_scale, Tensor& dlogits) {
  const OpTimer timer(KernelOp::cross_entropy_backward);
  constexpr const char* kOp = "cross_entropy_backward";
  SPW_TRY(check_logits(kOp, logits, targets));
  SPW_TRY(check_dlogits(kOp, logits, dlogits, grad_scale));
  const std::int64_t rows = logits.shape().rows();
  const std::int64_t classes = logits.shape().cols();
  const float* x = logits.data();
  const std::int32_t* t = targets.data();
  float* dx = dlogits.data();
  // Each row's loss comes free with its gradient and is dropped.
#pragma omp parallel for schedule(static) num_threads(compute_threads())
  for (std::int64_t i = 0; i < rows; ++i) {
    row_loss(x + i * classes, classes, t[i], dx + i * classes, grad_scale);
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
