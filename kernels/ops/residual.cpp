#include "kernels/ops/residual.hpp"

#include "kernels/op_timer.hpp"
#include "kernels/ops/op_checks.hpp"

#include <cstdint>
#include <string>

namespace spw::ops {


// Flat static splits, as the allocator first-touches whole tensors: each thread streams the
// pages on its own NUMA node, whatever the row length.

Status residual_forward(const Tensor& a, const Tensor& b, Tensor& y) {
  const OpTimer timer(KernelOp::residual_forward);
  constexpr const char* op = "residual_forward";
  SPW_TRY(check_data(op, "a", a));
  SPW_TRY(check_same(op, "b", b, "a", a));
  SPW_TRY(check_same(op, "y", y, "a", a));
  SPW_TRY(check_data(op, "b", b));
  SPW_TRY(check_data(op, "y", y));
  SPW_TRY(check_alias(op, "y", y, "a", a));
  SPW_TRY(check_alias(op, "y", y, "b", b));
  const std::int64_t n = a.numel();
  const float* pa = a.data();
  const float* pb = b.data();
  float* out = y.data();
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < n; ++i) out[i] = pa[i] + pb[i];
  return Status::success();
}

Status accumulate(Tensor& dst, const Tensor& src) {
  const OpTimer timer(KernelOp::accumulate);
  constexpr const char* op = "accumulate";
  SPW_TRY(check_data(op, "dst", dst));
  SPW_TRY(check_same(op, "src", src, "dst", dst));
  SPW_TRY(check_data(op, "src", src));
  SPW_TRY(check_alias(op, "dst", dst, "src", src));
  const std::int64_t n = dst.numel();
  const float* in = src.data();
  float* out = dst.data();
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < n; ++i) out[i] += in[i];
  return Status::success();
}

}  // namespace spw::ops
