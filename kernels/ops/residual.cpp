#include "kernels/ops/residual.hpp"

#include <cstdint>
#include <string>

namespace spw::ops {

namespace {

Status check_same(const char* op, const char* name, const Tensor& t, const char* like_name,
                  const Tensor& like) {
  if (t.shape().rows() != like.shape().rows() || t.shape().cols() != like.shape().cols()) {
    return error(StatusCode::shape_mismatch,
                 std::string(op) + ": " + name + " " + t.shape().to_string() + " does not fit " +
                     like_name + " " + like.shape().to_string() + ": shapes differ");
  }
  return Status::success();
}

Status check_data(const char* op, const char* name, const Tensor& t) {
  if (t.numel() > 0 && t.data() == nullptr) {
    return error(StatusCode::invalid_argument,
                 std::string(op) + ": " + name + " " + t.shape().to_string() + " has no data");
  }
  return Status::success();
}

// Each element is read before it is written, so the very same memory in and out is fine;
// a shifted overlap would read elements another iteration already overwrote.
Status check_alias(const char* op, const char* out_name, const Tensor& out, const char* in_name,
                   const Tensor& in) {
  const auto* o = reinterpret_cast<const unsigned char*>(out.data());
  const auto* i = reinterpret_cast<const unsigned char*>(in.data());
  if (o != i && o < i + in.bytes() && i < o + out.bytes()) {
    return error(StatusCode::invalid_argument,
                 std::string(op) + ": " + out_name + " " + out.shape().to_string() +
                     " partly overlaps " + in_name + " " + in.shape().to_string());
  }
  return Status::success();
}

}  // namespace

// Flat static splits, as the allocator first-touches whole tensors: each thread streams the
// pages on its own NUMA node, whatever the row length.

Status residual_forward(const Tensor& a, const Tensor& b, Tensor& y) {
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
