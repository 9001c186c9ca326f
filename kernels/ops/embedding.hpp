// Token + position embedding at the bottom of the byte-level GPT:
// y[b, t] = token_table[tokens[b, t]] + position_table[t].
#pragma once

#include <cstdint>
#include <span>

#include "kernels/status.hpp"
#include "kernels/tensor.hpp"

namespace spw::ops {

// tokens holds batch*seq ids in [0, vocab), row-major [batch, seq]. token_table is
// [vocab, d], position_table [max_seq, d] with seq <= max_seq; y is [batch*seq, d] or
// [batch, seq, d] and is overwritten. An id out of range or seq > max_seq is
// invalid_argument and leaves y untouched.
Status embedding_forward(std::span<const std::int32_t> tokens, std::int64_t batch,
                         std::int64_t seq, const Tensor& token_table,
                         const Tensor& position_table, Tensor& y);

// Scatter-adds dy [batch*seq, d] (or [batch, seq, d]) into dtoken_table [vocab, d] at each
// token's row and into dposition_table [max_seq, d] at each position's row. Accumulates (+=)
// so microbatches add up. No atomics; bit-identical from run to run with the same thread
// count (dposition_table also across thread counts). When 32 (threads - 1) vocab <=
// batch * seq, uses a workspace of threads - 1 token tables (out_of_memory / memory_cap if
// refused).
Status embedding_backward_weight(std::span<const std::int32_t> tokens, std::int64_t batch,
                                 std::int64_t seq, const Tensor& dy, Tensor& dtoken_table,
                                 Tensor& dposition_table);

}  // namespace spw::ops
