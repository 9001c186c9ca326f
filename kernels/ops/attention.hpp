// Causal multi-head self-attention, the core of a GPT block between its qkv and output
// Linears (nanoGPT's CausalSelfAttention without the projections). The forward keeps only the
// per-row log-sum-exp besides its output, so the stash is qkv, y and lse: backward recomputes
// the softmax from Q and K instead of keeping the [seq, seq] probabilities of every head.
#pragma once

#include <cstdint>

#include "kernels/status.hpp"
#include "kernels/tensor.hpp"

namespace spw::ops {

// qkv [batch*seq, 3d] holds Q | K | V side by side; head h owns columns [h*hd, (h+1)*hd) of
// each, hd = d / heads. Per (batch, head): S = Q Kᵀ / sqrt(hd), position t attends to 0..t,
// P = softmax(S) by rows, O = P V, written into y [batch*seq, d] at the head's columns.
// lse [batch, heads, seq] receives log Σ exp(S) of each softmax row, for the backward.
// The matrices may also carry a leading [batch, seq] split (rank 3): only rows and columns
// are checked. Results are bit-identical from run to run and for any thread count.
Status attention_forward(const Tensor& qkv, std::int64_t batch, std::int64_t seq,
                         std::int64_t heads, Tensor& y, Tensor& lse);

// Gradient of attention_forward. dy and y are [batch*seq, d], lse and qkv as the forward
// produced and read them; dqkv [batch*seq, 3d] is overwritten (it is not accumulated into).
Status attention_backward(const Tensor& dy, const Tensor& qkv, const Tensor& y,
                          const Tensor& lse, std::int64_t batch, std::int64_t seq,
                          std::int64_t heads, Tensor& dqkv);

}  // namespace spw::ops
