// What follows the attention heads in a pre-LayerNorm transformer layer:
//   x2 = x + proj(o);  y = x2 + fc2(gelu(fc1(LN2(x2)))),
// o being the heads' output [n, d]. The whole layer (gpt_blocks.cpp) and the back of a split
// one (gpt_split_layer.cpp) differ only in how they get o, so both run this part through one
// GptLayerTail, which owns the indices of its parameters and of its stash slots.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/status.hpp"
#include "kernels/tensor.hpp"
#include "runtime/block.hpp"
#include "runtime/parameter_store.hpp"

namespace spw {

class GptLayerTail {
 public:
  // The tail's tensors take the slots from these on in the block's saved stash, gradient
  // stash and scratch; the block keeps the ones before for its own.
  GptLayerTail(std::size_t saved_first, std::size_t grads_first, std::size_t scratch_first)
      : saved_(saved_first), grads_(grads_first), scratch_(scratch_first) {}

  // attn.proj, ln2, mlp.fc1 and mlp.fc2, named after `prefix` ("blocks.3.").
  Status create(ParameterStore& params, const std::string& prefix, std::int64_t d);
  // GPT-2's: normal weights, zero biases, LN2's scale 1.
  void init_parameters(ParameterStore& params, std::uint64_t seed) const;

  // Where the caller writes o before forward; it stays there for backward_weight.
  Result<Tensor*> heads_output(Stash& saved, std::int64_t rows, std::int64_t d) const;
  Status forward(ParameterStore& params, float ln_eps, Stash& saved, const Tensor& x,
                 Tensor& y) const;
  // From dy: dL/dx2 (the layer's input gradient along the residual path) and dL/do, which
  // the two accessors below return until the next call.
  Status backward_input(ParameterStore& params, BlockState& state, Stash& scratch,
                        const Tensor& dy) const;
  const Tensor& residual_gradient(const BlockState& state) const;
  const Tensor& heads_gradient(const Stash& scratch) const;
  // Accumulates the tail's parameter gradients.
  Status backward_weight(ParameterStore& params, BlockState& state, const Tensor& dy) const;

 private:
  enum Saved : std::size_t { kAttn, kX2, kLn2, kMean2, kRstd2, kH, kG };
  enum Grads : std::size_t { kDh, kDln2, kDx2 };
  enum Scratch : std::size_t { kWide, kNarrow };

  std::size_t saved_, grads_, scratch_;
  std::size_t proj_w_ = 0, proj_b_ = 0, ln2_w_ = 0, ln2_b_ = 0;
  std::size_t fc1_w_ = 0, fc1_b_ = 0, fc2_w_ = 0, fc2_b_ = 0;
};

}  // namespace spw
