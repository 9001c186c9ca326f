// Argument checks shared by the element-wise ops: each returns the Status an op gives back
// for a bad argument, with a message naming the op, the argument and its shape.
#pragma once

#include "kernels/status.hpp"
#include "kernels/tensor.hpp"

namespace spw::ops {

// shape_mismatch unless `t` has the rows and columns of `like`.
Status check_same(const char* op, const char* name, const Tensor& t, const char* like_name,
                  const Tensor& like);
// invalid_argument if `t` has elements but no memory.
Status check_data(const char* op, const char* name, const Tensor& t);
// invalid_argument if `out` overlaps `in` without being exactly the same memory.
Status check_alias(const char* op, const char* out_name, const Tensor& out, const char* in_name,
                   const Tensor& in);

}  // namespace spw::ops
