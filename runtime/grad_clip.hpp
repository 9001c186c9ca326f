// Gradient clipping by global norm, as torch.nn.utils.clip_grad_norm_ does it: every gradient
// of the model is scaled by max_norm / (norm + 1e-6) when that is below 1, where norm is the
// L2 norm over all of them together. GPT recipes clip at 1.0 to ride out the rare batch whose
// gradient is far larger than the rest.
//
// The norm must come out the same wherever the model's parameters live (one process, or the
// stages of a pipeline), so that a pipeline keeps the trainer's bits: each parameter's sum of
// squares is computed the same way at any thread count, and the sums are added in the
// model's parameter order.
#pragma once

#include <span>

#include "kernels/tensor.hpp"
#include "runtime/parameters.hpp"

namespace spw {

// Σ g² over the tensor in double: fixed blocks of elements, each summed in order, then the
// blocks in order, so the bits do not depend on the thread count.
double squared_norm(const Tensor& t);

// What the gradients are multiplied by for a global norm `norm`: max_norm / (norm + 1e-6)
// when below 1, else 1 (also for max_norm <= 0, which means no clipping).
float clip_coefficient(double norm, double max_norm);

// Multiplies every parameter's gradient by `coefficient` (nothing to do for 1).
void scale_gradients(std::span<const NamedParameter> parameters, float coefficient);

}  // namespace spw
