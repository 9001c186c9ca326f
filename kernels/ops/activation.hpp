// Point-wise activations: GELU (exact erf form, as GPT-2 and BERT train with) and ReLU.
// Shapes are compared as matrix views (rows() and cols()). An output may be the very same
// tensor as an input (in place), but must not partly overlap one.
#pragma once

#include "kernels/status.hpp"
#include "kernels/tensor.hpp"

namespace spw::ops {

// y = x Φ(x) = 0.5 x (1 + erf(x / √2)), the exact form (not the tanh approximation), to
// within 5e-6 relative wherever y is a normal float, the far left tail included (see
// gelu_scalar.hpp).
Status gelu_forward(const Tensor& x, Tensor& y);
// dx = dy (Φ(x) + x φ(x)), φ the standard normal density, the derivative to within 4e-7
// absolute (a rational fit; it crosses zero at x = -0.75); overwrites dx.
Status gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx);

// y = max(x, 0).
Status relu_forward(const Tensor& x, Tensor& y);
// dx = dy where x > 0, else 0 (the subgradient at 0 is 0, as in PyTorch); overwrites dx.
Status relu_backward(const Tensor& dy, const Tensor& x, Tensor& dx);

}  // namespace spw::ops
