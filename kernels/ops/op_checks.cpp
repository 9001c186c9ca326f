#include "kernels/ops/op_checks.hpp"

#include <string>

namespace spw::ops {

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

}  // namespace spw::ops
