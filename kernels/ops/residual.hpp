// Residual connections. The forward joins two branches; the backward of the branch point
// sums the gradients flowing back from both branches into one tensor.
#pragma once

#include "kernels/status.hpp"
#include "kernels/tensor.hpp"

namespace spw::ops {

// y = a + b. y may be the very same tensor as a or b (in place), but must not partly overlap
// either. Shapes are compared as matrix views (rows() and cols()).
Status residual_forward(const Tensor& a, const Tensor& b, Tensor& y);

// dst += src: how the backward of a residual branch point adds one branch's gradient into
// the other's.
Status accumulate(Tensor& dst, const Tensor& src);

}  // namespace spw::ops
