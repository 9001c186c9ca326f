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

// dlogits = grad_scale · (softmax(logits) − onehot(target)), overwritten. The caller passes
// grad_scale = 1 / (rows of the whole batch) so microbatch gradients add up to the gradient
// of the batch mean. dlogits may be logits itself, to reuse its memory.
Status cross_entropy_backward(const Tensor& logits, std::span<const std::int32_t> targets,
                              float grad_scale, Tensor& dlogits);

// correct = the number of rows whose largest logit (the first one, on ties) is the target.
Status count_correct(const Tensor& logits, std::span<const std::int32_t> targets,
                     std::int64_t& correct);

}  // namespace spw::ops
