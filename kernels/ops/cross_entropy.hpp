// Softmax cross-entropy with integer class targets, the loss at the top of the GPT and the
// MLP, and the count of correct argmax predictions for test accuracy.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/status.hpp"
#include "kernels/tensor.hpp"

namespace spw::ops {

// loss = mean over rows of -log softmax(logits)[target], through the max-subtracted
// log-sum-exp so that large logits neither overflow nor lose the loss. logits is
// [rows, classes] (any rank >= 2: the last dimension is the classes) with rows >= 1; targets
// holds one id in [0, classes) per row. The mean is summed in fixed blocks of rows:
// bit-identical from run to run and across thread counts.
Status cross_entropy_forward(const Tensor& logits, std::span<const std::int32_t> targets,
                             float& loss);

// loss_sum += the rows' -log softmax(logits)[target], summed as cross_entropy_forward sums
// them: the losses of a matrix handed over in pieces of a multiple of 64 rows (65,536 rows
// at most in all), each added to the last piece's sum, have the bits of the whole matrix's.
// For a loss computed a chunk of rows at a time; loss_sum is unchanged on error.
Status cross_entropy_add_loss(const Tensor& logits, std::span<const std::int32_t> targets,
                              double& loss_sum);

// cross_entropy_add_loss and cross_entropy_backward from one pass over the logits: adds the
// rows' losses to loss_sum and writes dlogits (which may be logits itself). For a head that
// computes its gradient chunk by chunk in its forward and never keeps the whole logits.
Status cross_entropy_loss_and_gradient(const Tensor& logits, std::span<const std::int32_t> targets,
                                       float grad_scale, Tensor& dlogits, double& loss_sum);

// dlogits = grad_scale · (softmax(logits) − onehot(target)), overwritten. The caller passes
// grad_scale = 1 / (rows of the whole batch) so microbatch gradients add up to the gradient
// of the batch mean. dlogits may be logits itself, to reuse its memory.
Status cross_entropy_backward(const Tensor& logits, std::span<const std::int32_t> targets,
                              float grad_scale, Tensor& dlogits);

// correct = the number of rows whose largest logit (the first one, on ties) is the target.
Status count_correct(const Tensor& logits, std::span<const std::int32_t> targets,
                     std::int64_t& correct);

}  // namespace spw::ops
