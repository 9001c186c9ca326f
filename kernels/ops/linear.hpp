// Linear (fully connected) layer in PyTorch's layout: weight [out, in], bias [out], so a
// checkpoint's tensors load as they are. Every product goes through spw::blas::sgemm with the
// transposes expressed as strides, but for shapes where BLIS packs a strided operand slowly:
// there the forward copies weightᵀ, and the weight gradient computes dWᵀ, into a per-thread
// scratch buffer of the weight's size that is kept between calls (linear.cpp says where).
//
// The backward is two calls, because zero-bubble pipeline schedules run the input gradient
// (on the critical path to the previous stage) and the weight gradient (deferrable) at
// different times.
#pragma once

#include "kernels/status.hpp"
#include "kernels/tensor.hpp"

namespace spw::ops {

// y [rows, out] = x [rows, in] · weightᵀ + bias, overwriting y. bias may be null. x and y are
// matrix views of any rank ≥ 2 (only rows() and cols() are checked); y must not share memory
// with x, weight or bias.
//
// Every call below fails with a shape_mismatch or invalid_argument status naming the op and
// the shapes before it writes anything, and with memory_cap (or out_of_memory) if its
// scratch buffer (above) would pass the rank's memory cap; its outputs are then unchanged.
Status linear_forward(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y);

// y = residual + x · weightᵀ + bias, the closing projection of a residual branch in one pass
// over y (a transformer block's attention projection and second MLP layer). residual has y's
// shape and may be y itself; otherwise the same contract as linear_forward.
Status linear_forward_residual(const Tensor& x, const Tensor& weight, const Tensor* bias,
                               const Tensor& residual, Tensor& y);

// dx [rows, in] = dy [rows, out] · weight, overwriting dx.
Status linear_backward_input(const Tensor& dy, const Tensor& weight, Tensor& dx);

// dweight [out, in] += dyᵀ · x and, if dbias is not null, dbias [out] += the column sums of
// dy. Accumulates, so microbatches sum their gradients; the caller zeroes them per step.
// Results are bit-identical from run to run.
Status linear_backward_weight(const Tensor& dy, const Tensor& x, Tensor& dweight,
                              Tensor* dbias);

}  // namespace spw::ops
