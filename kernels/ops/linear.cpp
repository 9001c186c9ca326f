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

// A short product finds its operands out of cache in training: between two microbatches'
// visits to a layer the other layers' weights, gradients and stashes pass through L3. BLIS
// then packs them with loads a row apart, a page apart for rows of 4 KiB, where the hardware
// prefetchers do not follow, so each line waits for memory: on 128 tokens, one thread, with
// a 64 MiB sweep between calls, raw sgemm ran gpt-s's layers at 115-145 GFLOP/s against
// 177-225 with them in cache. Reading the operands that have been out of use (the weight,
// the gradient that sums microbatches, the stashed input) once in address order first, which
// the prefetchers do follow, brings them in at memory's bandwidth: whole training steps (one
// thread, 2026-11-28) took 0.90x as long for gpt-s with 16 microbatches of 128 tokens and
// 0.96x for gpt-m with 8 of 256, but 1.00x for gpt-s with 2 of 1,024, so longer products
// skip it.
constexpr std::int64_t kMaxRowsToPreload = 512;

void preload(const float* data, std::int64_t count) {
  constexpr std::int64_t kFloatsPerLine = 64 / sizeof(float);
  float sum = 0.0f;
#pragma omp parallel for simd reduction(+ : sum) schedule(static)
  for (std::int64_t i = 0; i < count; i += kFloatsPerLine) sum += data[i];
  asm volatile("" : : "x"(sum));  // the loads must happen; their sum is of no use
}

enum class Store { assign, add };

// to [cols, rows] = (or +=) from [rows, cols]ᵀ, each 16 x 16 block through registers where it
// is whole; threads take rows of `to`.
template <Store kStore>
void transpose_into(const float* from, std::int64_t rows, std::int64_t cols, float* to) {
  constexpr std::int64_t kBlock = 16;
  const std::int64_t blocks = (cols + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (std::int64_t cb = 0; cb < blocks; ++cb) {
    const std::int64_t c0 = cb * kBlock;
    const std::int64_t c_count = std::min(kBlock, cols - c0);
    for (std::int64_t r0 = 0; r0 < rows; r0 += kBlock) {
      const std::int64_t r_count = std::min(kBlock, rows - r0);
#if defined(__AVX512F__)
      if (c_count == kBlock && r_count == kBlock) {
        __m512 v[kBlock];
        for (std::int64_t r = 0; r < kBlock; ++r) {
          v[r] = _mm512_loadu_ps(from + (r0 + r) * cols + c0);
        }
        transpose16_in_registers(v);
        for (std::int64_t c = 0; c < kBlock; ++c) {
          float* row = to + (c0 + c) * rows + r0;
          if constexpr (kStore == Store::add) v[c] = _mm512_add_ps(_mm512_loadu_ps(row), v[c]);
          _mm512_storeu_ps(row, v[c]);
        }
        continue;
      }
#endif
      for (std::int64_t c = c0; c < c0 + c_count; ++c) {
        for (std::int64_t r = r0; r < r0 + r_count; ++r) {
          float& slot = to[c * rows + r];
          slot = kStore == Store::add ? slot + from[r * cols + c] : from[r * cols + c];
        }
      }
    }
  }
}

// A weight-sized buffer reused from call to call (mapping fresh pages per call would cost
// about what the transposed products save), shared by the forward and the weight gradient:
// a thread runs one at a time, and both need [in, out].
Result<float*> weight_scratch(std::int64_t out, std::int64_t in) {
  thread_local ScratchBuffer scratch;
  SPW_ASSIGN_OR_RETURN(void* memory,
                       scratch.reserve(static_cast<std::size_t>(in * out) * sizeof(float)));
  return static_cast<float*>(memory);
}

// dweight += (xᵀ · dy)ᵀ through product, scratch of [in, out].
void weight_gradient_through(float* product, const Tensor& dy, const Tensor& x,
                             Tensor& dweight) {
  const std::int64_t rows = dy.shape().rows();
  const std::int64_t out = dy.shape().cols();
  const std::int64_t in = x.shape().cols();
  blas::sgemm(Op::transpose, Op::none, in, out, rows, 1.0f, x.data(), in, dy.data(), out, 0.0f,
              product, out);
  transpose_into<Store::add>(product, in, out, dweight.data());
}

// x · weightᵀ makes BLIS pack weightᵀ, reading for each of its columns a row of the weight,
// in rows; with the rows a multiple of 2 KiB apart, the rows it reads together share L1
// sets. On the Zen 5 (BLIS's skx kernels, one thread, 2026-11-28) the forward of a
// microbatch of 128 tokens ran at 116-124 GFLOP/s for in 1024 and 2048 and 156-160 for in
// 512, against 162-174 for in 256, 768 and 1008, while the product with weightᵀ copied
// into contiguous rows first ran at 190-206 without the copy and 165-175 with it. The copy
// costs a read and a write of the weight per call, so it pays where the packing is slow, the
// weight small enough to stay in cache and the product short: at 4096 x 1024 (16 MiB) the
// copy made it slower, and on 2048 tokens (bench_kernels, 2 runs alternated) the d 512
// layers ran 0.91-0.98x. AVX-512 builds only: the copy's transposes are AVX-512's, and BLIS's
// AVX2 kernels, with another blocking, were not measured.
constexpr std::int64_t kAliasingRowBytes = 2048;
constexpr std::int64_t kMaxCopiedWeightFloats = std::int64_t{1} << 20;  // 4 MiB
constexpr std::int64_t kMaxRowsForCopiedWeight = 512;

bool forward_through_copied_weight(std::int64_t rows, std::int64_t out, std::int64_t in) {
#if defined(__AVX512F__)
  return (in * static_cast<std::int64_t>(sizeof(float))) % kAliasingRowBytes == 0 &&
         in * out <= kMaxCopiedWeightFloats && rows <= kMaxRowsForCopiedWeight;
#else
  (void)rows;
  (void)out;
  (void)in;
  return false;
#endif
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
  // Reserved before y is touched, so that a memory cap leaves y as it was.
  float* transposed = nullptr;
  if (in > 0 && forward_through_copied_weight(rows, out, in)) {
    SPW_ASSIGN_OR_RETURN(transposed, weight_scratch(out, in));
  }

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
  const float beta = b != nullptr || res != nullptr ? 1.0f : 0.0f;
  if (transposed != nullptr) {
    transpose_into<Store::assign>(weight.data(), out, in, transposed);
    blas::sgemm(Op::none, Op::none, rows, out, in, 1.0f, x.data(), in, transposed, out, beta, yp,
                out);
    return Status::success();
  }
  if (rows <= kMaxRowsToPreload) preload(weight.data(), in * out);  // x is fresh
  blas::sgemm(Op::none, Op::transpose, rows, out, in, 1.0f, x.data(), in, weight.data(), in, beta,
              yp, out);
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
  if (rows <= kMaxRowsToPreload) preload(weight.data(), in * out);  // dy is fresh
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
  }
  // Reserved before any gradient is touched, so that a memory cap leaves them as they were.
  float* product = nullptr;
  if (rows > 0 && out > 0 && in > 0 && weight_gradient_transposed(out, in)) {
    SPW_ASSIGN_OR_RETURN(product, weight_scratch(out, in));
  }
  if (dbias != nullptr) {
    // One extra read of dy, next to the 2·rows·out·in flops of the product: a few percent
    // at the smallest widths spillway trains with, and it warms dy in cache for sgemm's
    // packing when dy fits.
    SPW_TRY(bias_backward_weight(dy, *dbias));
  }
  if (rows == 0 || out == 0 || in == 0) return Status::success();
  // The gradient sums microbatches, and x was stashed by the forward: both are old. dy is
  // fresh from the op after.
  if (rows <= kMaxRowsToPreload) {
    preload(dweight.data(), in * out);
    preload(x.data(), rows * in);
  }
  if (product != nullptr) {
    weight_gradient_through(product, dy, x, dweight);
    return Status::success();
  }
  blas::sgemm(Op::transpose, Op::none, out, in, rows, 1.0f, dy.data(), out, x.data(), in, 1.0f,
              dweight.data(), in);
  return Status::success();
}

}  // namespace spw::ops
