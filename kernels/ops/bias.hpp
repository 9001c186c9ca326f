// A bias added to every row of a matrix, as a standalone op: for layers whose product is not
// a Linear (Linear fuses its own bias into the sgemm).
#pragma once

#include "kernels/status.hpp"
#include "kernels/tensor.hpp"

namespace spw::ops {

// y [rows, cols] += bias [cols] on every row, in place. y is a matrix view of rank ≥ 2.
Status bias_forward(Tensor& y, const Tensor& bias);

// dbias [cols] += Σ_rows dy [rows, cols]. Accumulates, like every weight gradient. Each
// column is summed in row order in double precision, so the result is bit-identical for any
// thread count.
Status bias_backward_weight(const Tensor& dy, Tensor& dbias);

}  // namespace spw::ops
