#include "kernels/ops/activation.hpp"

#include "kernels/op_timer.hpp"
#include "kernels/ops/gelu_scalar.hpp"
#include "kernels/ops/op_checks.hpp"

#if defined(__AVX512F__) && defined(__AVX512DQ__)
#include "kernels/ops/gelu_avx512.hpp"
#elif defined(__AVX2__) && defined(__FMA__)
#include "kernels/ops/gelu_avx2.hpp"
#endif

#include <algorithm>
#include <cstdint>
#include <string>

namespace spw::ops {

using namespace gelu_detail;

namespace {

Status check_unary(const char* op, const Tensor& x, const Tensor& y) {
  SPW_TRY(check_data(op, "x", x));
  SPW_TRY(check_same(op, "y", y, "x", x));
  SPW_TRY(check_data(op, "y", y));
  return check_alias(op, "y", y, "x", x);
}

Status check_backward(const char* op, const Tensor& dy, const Tensor& x, const Tensor& dx) {
  SPW_TRY(check_data(op, "x", x));
  SPW_TRY(check_same(op, "dy", dy, "x", x));
  SPW_TRY(check_same(op, "dx", dx, "x", x));
  SPW_TRY(check_data(op, "dy", dy));
  SPW_TRY(check_data(op, "dx", dx));
  SPW_TRY(check_alias(op, "dx", dx, "dy", dy));
  return check_alias(op, "dx", dx, "x", x);
}

// GELU works through its tensors in blocks of one page, so the static split of blocks is the
// allocator's first-touch split. From 16 MiB per tensor up it fetches the next block of each
// input while it computes on this one: there the hardware prefetcher alone left the forward
// at ~75% of memcpy bandwidth, against ~90% with the prefetch. Below that the tensors stay in
// cache between calls and the prefetches only cost issue slots (10-15%), so they are left out.
// From the same size up, the AVX2 loops write their output with streaming stores (when it is
// 32-byte aligned): a tensor that large leaves the cache before anyone reads it, and a normal
// store first reads the line it writes. On the Zen 3 at [2048, 2048] and [2048, 4096] in
// bench_kernels (op GB/s, medians of 3 runs alternated with the normal stores, 2026-11-27)
// that made the backward 1.14-1.18x as fast on 1 and 2 threads, and the forward, bound by its
// arithmetic, 1.00-1.04x; glibc's memcpy, the benchmarks' baseline, streams there too.
constexpr std::int64_t kBlock = 4096 / sizeof(float);
constexpr std::int64_t kLineFloats = 64 / sizeof(float);
constexpr std::int64_t kPrefetchFloats = (std::int64_t{16} << 20) / sizeof(float);

void prefetch_next_block(const float* data, std::int64_t end, std::int64_t n) {
  const std::int64_t count = std::min(kBlock, n - end);
  for (std::int64_t k = 0; k < count; k += kLineFloats) __builtin_prefetch(data + end + k, 0, 3);
}

// Blocks start at whole pages from the tensor's first float, so an aligned first float makes
// every block's streaming stores aligned.
[[maybe_unused]] bool streams_to(const float* out) {
  return reinterpret_cast<std::uintptr_t>(out) % 32 == 0;
}

}  // namespace

// The loops below split the flat elements statically, as the allocator first-touches whole
// tensors: each thread streams the pages on its own NUMA node, whatever the row length.

Status gelu_forward(const Tensor& x, Tensor& y) {
  const OpTimer timer(KernelOp::gelu_forward);
  SPW_TRY(check_unary("gelu_forward", x, y));
  const std::int64_t n = x.numel();
  const float* in = x.data();
  float* out = y.data();
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
  const bool prefetch = n >= kPrefetchFloats;
#if defined(__AVX512F__) && defined(__AVX512DQ__)
  const Tables16 tables = load_tables();
#elif defined(__AVX2__) && defined(__FMA__)
  const bool stream = prefetch && streams_to(out);
#endif
#pragma omp parallel for schedule(static)
  for (std::int64_t block = 0; block < blocks; ++block) {
    const std::int64_t begin = block * kBlock;
    const std::int64_t end = std::min(n, begin + kBlock);
    if (prefetch) prefetch_next_block(in, end, n);
#if defined(__AVX512F__) && defined(__AVX512DQ__)
    const Table32 quad = load_table32(gelu_tables_avx512::kQuad);
    gelu_forward16(in, out, begin, end, tables, quad);
#elif defined(__AVX2__) && defined(__FMA__)
    const auto gelu = [](__m256, __m256 v) { return gelu8_any(v); };
    if (stream) {
      map8<true>(in, nullptr, out, begin, end, gelu);
    } else {
      map8(in, nullptr, out, begin, end, gelu);
    }
#else
    for (std::int64_t i = begin; i < end; ++i) out[i] = gelu_scalar(in[i]);
#endif
  }
  return Status::success();
}

Status gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx) {
  const OpTimer timer(KernelOp::gelu_backward);
  SPW_TRY(check_backward("gelu_backward", dy, x, dx));
  const std::int64_t n = x.numel();
  const float* g = dy.data();
  const float* in = x.data();
  float* out = dx.data();
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
  const bool prefetch = n >= kPrefetchFloats;
#if !(defined(__AVX512F__) && defined(__AVX512DQ__)) && defined(__AVX2__) && defined(__FMA__)
  const bool stream = prefetch && streams_to(out);
#endif
#pragma omp parallel for schedule(static)
  for (std::int64_t block = 0; block < blocks; ++block) {
    const std::int64_t begin = block * kBlock;
    const std::int64_t end = std::min(n, begin + kBlock);
    if (prefetch) {
      prefetch_next_block(g, end, n);
      prefetch_next_block(in, end, n);
    }
#if defined(__AVX512F__) && defined(__AVX512DQ__)
    const Table32 deriv = load_table32(gelu_tables_avx512::kDeriv);
    map16(in, g, out, begin, end, [&deriv](__m512 gv, __m512 v) {
      return _mm512_mul_ps(gv, gelu_derivative16(v, deriv));
    });
#elif defined(__AVX2__) && defined(__FMA__)
    const auto gradient = [](__m256 gv, __m256 v) {
      return _mm256_mul_ps(gv, gelu_derivative8(v));
    };
    if (stream) {
      map8<true>(in, g, out, begin, end, gradient);
    } else {
      map8(in, g, out, begin, end, gradient);
    }
#else
#pragma omp simd simdlen(16)
    for (std::int64_t i = begin; i < end; ++i) out[i] = g[i] * gelu_derivative(in[i]);
#endif
  }
  return Status::success();
}

Status relu_forward(const Tensor& x, Tensor& y) {
  const OpTimer timer(KernelOp::relu_forward);
  SPW_TRY(check_unary("relu_forward", x, y));
  const std::int64_t n = x.numel();
  const float* in = x.data();
  float* out = y.data();
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < n; ++i) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
  return Status::success();
}

Status relu_backward(const Tensor& dy, const Tensor& x, Tensor& dx) {
  const OpTimer timer(KernelOp::relu_backward);
  SPW_TRY(check_backward("relu_backward", dy, x, dx));
  const std::int64_t n = x.numel();
  const float* g = dy.data();
  const float* in = x.data();
  float* out = dx.data();
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < n; ++i) out[i] = in[i] > 0.0f ? g[i] : 0.0f;
  return Status::success();
}

}  // namespace spw::ops
