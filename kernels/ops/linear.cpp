#include "kernels/ops/linear.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/blas.hpp"
#include "kernels/numa_allocator.hpp"
#include "kernels/op_timer.hpp"
#include "kernels/ops/bias.hpp"
#include "kernels/ops/transpose16.hpp"

namespace spw::ops {

namespace {

using blas::Op;

std::string text(const Tensor& t) { return t.shape().to_string(); }

Status mismatch(const char* op, const std::string& detail) {
  return error(StatusCode::shape_mismatch, std::string(op) + ": " + detail);
}

Status check_weight(const char* op, const Tensor& weight) {
  if (weight.rank() != 2) {
    return mismatch(op, "weight " + text(weight) + " is not a matrix [out, in]");
  }
  return Status::success();
}

Status check_activation(const char* op, const char* name, const Tensor& t) {
  if (t.rank() < 2) return mismatch(op, std::string(name) + " " + text(t) + " is not a matrix");
  return Status::success();
}

// An output of shape `want` (as a matrix view) for the inputs named in `inputs`.
Status check_output(const char* op, const char* name, const Tensor& t, std::int64_t rows,
                    std::int64_t cols, const std::string& inputs) {
  if (t.rank() < 2 || t.shape().rows() != rows || t.shape().cols() != cols) {
    return mismatch(op, std::string(name) + " " + text(t) + " does not fit " + inputs +
                            ": expected " + Shape{rows, cols}.to_string());
  }
  return Status::success();
}

Status check_data(const char* op, const char* name, const Tensor& t) {
  if (t.numel() > 0 && t.data() == nullptr) {
    return error(StatusCode::invalid_argument,
                 std::string(op) + ": " + name + " " + text(t) + " has no data");
  }
  return Status::success();
}

// sgemm writes its output while still reading its operands, so an output sharing memory with
// an input would make the result depend on BLIS's blocking.
Status check_disjoint(const char* op, const char* out_name, const Tensor& out,
                      const char* in_name, const Tensor& in) {
  const auto* o = reinterpret_cast<const unsigned char*>(out.data());
  const auto* i = reinterpret_cast<const unsigned char*>(in.data());
  if (o < i + in.bytes() && i < o + out.bytes()) {
    return error(StatusCode::invalid_argument,
                 std::string(op) + ": " + out_name + " " + text(out) + " overlaps " + in_name +
                     " " + text(in) + "; outputs must not alias inputs");
  }
  return Status::success();
}

void zero_rows(float* data, std::int64_t rows, std::int64_t cols) {
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    float* row = data + r * cols;
#pragma omp simd
    for (std::int64_t c = 0; c < cols; ++c) row[c] = 0.0f;
  }
}

// BLIS 0.9 as Debian ships it runs on Zen 4 with its zen3 kernels, and those compute
// dW = dYᵀ·X at ~80% of their speed when dW has few rows (out ≤ 256) and more columns: 82
// against 93 GFLOP/s for out 256, in 1024 over 2048 rows on one thread, 158 against 174 on
// two (best of 40 alternated runs, page-aligned operands). The transposed product
// dWᵀ = Xᵀ·dY into scratch, added into dW through 16 x 16 register transposes, runs at the
// faster rate; other shapes are fastest as they are (out 512, in 2048: 104 against 95).
constexpr std::int64_t kTransposedMaxOut = 256;

bool weight_gradient_transposed(std::int64_t out, std::int64_t in) {
  return out <= kTransposedMaxOut && in > out;
}

// dweight [out, in] += scratch [in, out]ᵀ, each 16 x 16 block through registers where it is
// whole; threads take rows of dweight.
void add_transposed(const float* scratch, std::int64_t out, std::int64_t in, float* dweight) {
  constexpr std::int64_t kBlock = 16;
  const std::int64_t blocks = (out + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (std::int64_t ob = 0; ob < blocks; ++ob) {
    const std::int64_t o0 = ob * kBlock;
    const std::int64_t o_count = std::min(kBlock, out - o0);
    for (std::int64_t i0 = 0; i0 < in; i0 += kBlock) {
      const std::int64_t i_count = std::min(kBlock, in - i0);
#if defined(__AVX512F__)
      if (o_count == kBlock && i_count == kBlock) {
        __m512 r[kBlock];
        for (std::int64_t i = 0; i < kBlock; ++i) r[i] = _mm512_loadu_ps(scratch + (i0 + i) * out + o0);
        transpose16_in_registers(r);
        for (std::int64_t o = 0; o < kBlock; ++o) {
          float* row = dweight + (o0 + o) * in + i0;
          _mm512_storeu_ps(row, _mm512_add_ps(_mm512_loadu_ps(row), r[o]));
        }
        continue;
      }
#endif
      for (std::int64_t o = o0; o < o0 + o_count; ++o) {
        for (std::int64_t i = i0; i < i0 + i_count; ++i) dweight[o * in + i] += scratch[i * out + o];
      }
    }
  }
}

// dweight += (xᵀ · dy)ᵀ through reused scratch (mapping fresh pages per call would cost about
// what the transposed product saves).
Status weight_gradient_through_scratch(const Tensor& dy, const Tensor& x, Tensor& dweight) {
  const std::int64_t rows = dy.shape().rows();
  const std::int64_t out = dy.shape().cols();
  const std::int64_t in = x.shape().cols();
  thread_local ScratchBuffer scratch;
  SPW_ASSIGN_OR_RETURN(void* memory,
                       scratch.reserve(static_cast<std::size_t>(in * out) * sizeof(float)));
  auto* product = static_cast<float*>(memory);
  blas::sgemm(Op::transpose, Op::none, in, out, rows, 1.0f, x.data(), in, dy.data(), out, 0.0f,
              product, out);
  add_transposed(product, out, in, dweight.data());
  return Status::success();
}

// y = residual + x · weightᵀ + bias, residual and bias optional. The addends ride in C: rows
// start as residual + bias and sgemm adds the product with beta = 1. That is one streaming
// write of y, against separate bias and residual passes that would read y back after the
// product and write it again.
Status forward(const char* op, const Tensor& x, const Tensor& weight, const Tensor* bias,
               const Tensor* residual, Tensor& y) {
  SPW_TRY(check_weight(op, weight));
  SPW_TRY(check_activation(op, "x", x));
  const std::int64_t out = weight.dim(0);
  const std::int64_t in = weight.dim(1);
  const std::int64_t rows = x.shape().rows();
  if (x.shape().cols() != in) {
    return mismatch(op, "x " + text(x) + " does not fit weight " + text(weight) +
                            ": in features " + std::to_string(x.shape().cols()) + " vs " +
                            std::to_string(in));
  }
  SPW_TRY(check_output(op, "y", y, rows, out, "x " + text(x) + " and weight " + text(weight)));
  if (bias != nullptr && !(bias->shape() == Shape{out})) {
    return mismatch(op, "bias " + text(*bias) + " does not fit weight " + text(weight) +
                            ": expected " + Shape{out}.to_string());
  }
  if (residual != nullptr) {
    SPW_TRY(check_output(op, "residual", *residual, rows, out,
                         "x " + text(x) + " and weight " + text(weight)));
  }
  SPW_TRY(check_data(op, "x", x));
  SPW_TRY(check_data(op, "weight", weight));
  SPW_TRY(check_data(op, "y", y));
  SPW_TRY(check_disjoint(op, "y", y, "x", x));
  SPW_TRY(check_disjoint(op, "y", y, "weight", weight));
  if (bias != nullptr) {
    SPW_TRY(check_data(op, "bias", *bias));
    SPW_TRY(check_disjoint(op, "y", y, "bias", *bias));
  }
  if (residual != nullptr) {
    SPW_TRY(check_data(op, "residual", *residual));
    // y may be the residual itself (updated in place), but not overlap it otherwise.
    if (residual->data() != y.data()) SPW_TRY(check_disjoint(op, "y", y, "residual", *residual));
  }
  if (rows == 0 || out == 0) return Status::success();

  float* yp = y.data();
  const float* b = bias != nullptr ? bias->data() : nullptr;
  const float* res = residual != nullptr ? residual->data() : nullptr;
  if (b != nullptr || res != nullptr) {
#pragma omp parallel for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      float* row = yp + r * out;
      const float* res_row = res != nullptr ? res + r * out : nullptr;
      if (res_row != nullptr && b != nullptr) {
#pragma omp simd
        for (std::int64_t c = 0; c < out; ++c) row[c] = res_row[c] + b[c];
      } else if (res_row != nullptr) {
#pragma omp simd
        for (std::int64_t c = 0; c < out; ++c) row[c] = res_row[c];
      } else {
#pragma omp simd
        for (std::int64_t c = 0; c < out; ++c) row[c] = b[c];
      }
    }
  } else if (in == 0) {
    zero_rows(yp, rows, out);
  }
  if (in == 0) return Status::success();
  const bool accumulate = b != nullptr || res != nullptr;
  blas::sgemm(Op::none, Op::transpose, rows, out, in, 1.0f, x.data(), in, weight.data(), in,
              accumulate ? 1.0f : 0.0f, yp, out);
  return Status::success();
}

}  // namespace

Status linear_forward(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y) {
  const OpTimer timer(KernelOp::linear_forward);
  return forward("linear_forward", x, weight, bias, nullptr, y);
}

Status linear_forward_residual(const Tensor& x, const Tensor& weight, const Tensor* bias,
                               const Tensor& residual, Tensor& y) {
  const OpTimer timer(KernelOp::linear_forward_residual);
  return forward("linear_forward_residual", x, weight, bias, &residual, y);
}

Status linear_backward_input(const Tensor& dy, const Tensor& weight, Tensor& dx) {
  const OpTimer timer(KernelOp::linear_backward_input);
  constexpr const char* op = "linear_backward_input";
  SPW_TRY(check_weight(op, weight));
  SPW_TRY(check_activation(op, "dy", dy));
  const std::int64_t out = weight.dim(0);
  const std::int64_t in = weight.dim(1);
  const std::int64_t rows = dy.shape().rows();
  if (dy.shape().cols() != out) {
    return mismatch(op, "dy " + text(dy) + " does not fit weight " + text(weight) +
                            ": out features " + std::to_string(dy.shape().cols()) + " vs " +
                            std::to_string(out));
  }
  SPW_TRY(check_output(op, "dx", dx, rows, in, "dy " + text(dy) + " and weight " + text(weight)));
  SPW_TRY(check_data(op, "dy", dy));
  SPW_TRY(check_data(op, "weight", weight));
  SPW_TRY(check_data(op, "dx", dx));
  SPW_TRY(check_disjoint(op, "dx", dx, "dy", dy));
  SPW_TRY(check_disjoint(op, "dx", dx, "weight", weight));
  if (rows == 0 || in == 0) return Status::success();
  if (out == 0) {
    zero_rows(dx.data(), rows, in);
    return Status::success();
  }
  blas::sgemm(Op::none, Op::none, rows, in, out, 1.0f, dy.data(), out, weight.data(), in, 0.0f,
              dx.data(), in);
  return Status::success();
}

Status linear_backward_weight(const Tensor& dy, const Tensor& x, Tensor& dweight,
                              Tensor* dbias) {
  const OpTimer timer(KernelOp::linear_backward_weight);
  constexpr const char* op = "linear_backward_weight";
  SPW_TRY(check_activation(op, "dy", dy));
  SPW_TRY(check_activation(op, "x", x));
  const std::int64_t rows = dy.shape().rows();
  const std::int64_t out = dy.shape().cols();
  const std::int64_t in = x.shape().cols();
  if (x.shape().rows() != rows) {
    return mismatch(op, "dy " + text(dy) + " does not fit x " + text(x) + ": rows " +
                            std::to_string(rows) + " vs " + std::to_string(x.shape().rows()));
  }
  const std::string inputs = "dy " + text(dy) + " and x " + text(x);
  if (!(dweight.shape() == Shape{out, in})) {
    return mismatch(op, "dweight " + text(dweight) + " does not fit " + inputs + ": expected " +
                            Shape{out, in}.to_string());
  }
  if (dbias != nullptr && !(dbias->shape() == Shape{out})) {
    return mismatch(op, "dbias " + text(*dbias) + " does not fit " + inputs + ": expected " +
                            Shape{out}.to_string());
  }
  SPW_TRY(check_data(op, "dy", dy));
  SPW_TRY(check_data(op, "x", x));
  SPW_TRY(check_data(op, "dweight", dweight));
  SPW_TRY(check_disjoint(op, "dweight", dweight, "dy", dy));
  SPW_TRY(check_disjoint(op, "dweight", dweight, "x", x));
  if (dbias != nullptr) {
    SPW_TRY(check_data(op, "dbias", *dbias));
    SPW_TRY(check_disjoint(op, "dbias", *dbias, "dy", dy));
    SPW_TRY(check_disjoint(op, "dbias", *dbias, "x", x));
    SPW_TRY(check_disjoint(op, "dbias", *dbias, "dweight", dweight));
    // One extra read of dy, next to the 2·rows·out·in flops of the product: a few percent
    // at the smallest widths spillway trains with, and it warms dy in cache for sgemm's
    // packing when dy fits.
    SPW_TRY(bias_backward_weight(dy, *dbias));
  }
  if (rows == 0 || out == 0 || in == 0) return Status::success();
  if (weight_gradient_transposed(out, in)) return weight_gradient_through_scratch(dy, x, dweight);
  blas::sgemm(Op::transpose, Op::none, out, in, rows, 1.0f, dy.data(), out, x.data(), in, 1.0f,
              dweight.data(), in);
  return Status::success();
}

}  // namespace spw::ops
