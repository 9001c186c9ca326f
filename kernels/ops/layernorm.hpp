// LayerNorm over the last dimension: y = (x - mean) * rstd * gamma + beta per row, with
// rstd = 1 / sqrt(var + eps) and the biased variance, as in PyTorch's nn.LayerNorm. The
// forward keeps mean and rstd of every row so the backward does not recompute statistics.
#pragma once

#include "kernels/status.hpp"
#include "kernels/tensor.hpp"

namespace spw::ops {

// x and y are [rows, d] (any rank >= 2: only the rows and the last dimension are checked);
// gamma and beta are [d]; mean and rstd receive one value per row: [rows], or x's leading
// dimensions. eps must be positive and finite (models use 1e-5). y may be x itself: each
// row is read whole before it is written.
Status layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                         Tensor& y, Tensor& mean, Tensor& rstd);

// dx = d(loss)/dx from dy, with mean and rstd from the forward. dx is overwritten; it may be
// dy itself.
Status layernorm_backward_input(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                const Tensor& mean, const Tensor& rstd, Tensor& dx);

// dgamma += Σ_rows dy ⊙ xhat and dbeta += Σ_rows dy: accumulated, so microbatches add up.
// Rows are summed in groups fixed by the row count alone, then the groups in order: results
// are bit-identical from run to run and across thread counts. Needs a workspace of up to
// 256 x 2d floats for the group partials (out_of_memory / memory_cap if refused).
Status layernorm_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                 const Tensor& rstd, Tensor& dgamma, Tensor& dbeta);

}  // namespace spw::ops
