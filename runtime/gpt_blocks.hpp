// The blocks of a GPT (nanoGPT's layout, byte-level vocabulary): token + position embedding,
// pre-LayerNorm transformer blocks, and the final LayerNorm with the untied LM head and the
// cross-entropy loss. Parameter names and shapes are PyTorch's state_dict ones.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/block.hpp"

namespace spw {

// The standard deviation of the normal initial weights (GPT-2's).
inline constexpr double kGptInitStd = 0.02;

struct GptShape {
  std::int64_t layers = 8;
  std::int64_t d_model = 256;
  std::int64_t heads = 8;
  std::int64_t seq = 128;
  std::int64_t vocab = 256;
  float ln_eps = 1e-5f;
  // 0: the head keeps a microbatch's [rows, vocab] logits from its forward to its backward.
  // N > 0: it computes them N rows at a time, and in a training forward (backward_follows)
  // also their gradient, its input gradient and its weight gradient, so that no [rows, vocab]
  // tensor outlives a chunk: a buffer of [N, vocab] replaces a stash of [rows, vocab] per
  // microbatch in flight, at no extra flops (the fused linear cross-entropy of Liger-Kernel).
  // The weight gradient is then complete after the forward, so the forward and backward of
  // the head's stage must run on one rank (not PipeFB).
  std::int64_t head_chunk_rows = 0;
};

Result<std::unique_ptr<Block>> make_gpt_embedding(const GptShape& shape);
Result<std::unique_ptr<Block>> make_transformer_block(const GptShape& shape, std::int64_t index);
Result<std::unique_ptr<Block>> make_gpt_head(const GptShape& shape);

}  // namespace spw
