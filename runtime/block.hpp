// A block: the unit a model is cut into pipeline stages by (gpt: the embedding, each
// transformer block, the final LayerNorm with the head and loss; mlp: each Linear layer).
//
// Contract with whoever runs blocks (the trainer, the pipeline executor):
// - forward(mb, input, output, state) computes `output` from `input` (the first block reads
//   the microbatch's data instead; the last block writes the loss instead of an output) and
//   keeps in `state` what its backward needs.
// - backward_input(mb, input, doutput, dinput, state) writes dinput (none for the first
//   block; the last block starts from its loss, scaled by mb.grad_scale, and gets no
//   doutput); backward_weight(mb, input, doutput, state) then ACCUMULATES the parameter
//   gradients. Between the two calls other blocks and microbatches may run (zero-bubble
//   schedules do).
// - The caller keeps `input`, `doutput` and `state` unchanged from forward until
//   backward_weight of the same microbatch returns.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/status.hpp"
#include "kernels/tensor.hpp"
#include "runtime/parameters.hpp"
#include "runtime/stash.hpp"

namespace spw {

// One microbatch as the blocks see it.
struct MicrobatchData {
  std::int64_t samples = 0;                // sequences (gpt) or examples (mlp)
  std::int64_t seq = 1;                    // tokens per sequence (1 for mlp)
  const std::int32_t* tokens = nullptr;    // gpt inputs, [samples * seq]
  const float* features = nullptr;         // mlp inputs, [samples, input width]
  const std::int32_t* targets = nullptr;   // [samples * seq] (gpt) or [samples] (mlp)
  // d(step loss)/d(this microbatch's summed per-position losses): 1 / positions in the
  // whole batch, so that microbatches add up to the batch mean.
  float grad_scale = 1.0f;
  // A backward of this microbatch follows (training), so a block may start on its gradients
  // in the forward (Block::accumulates_in_forward); false for evaluations and sampling.
  bool backward_follows = false;

  std::int64_t rows() const { return samples * seq; }
};

// What a block keeps for one microbatch between forward and backward.
struct BlockState {
  Stash saved{MemoryCategory::stash};       // activations from the forward
  Stash grads{MemoryCategory::workspace};   // input-gradient results the weight gradient needs
  void release() {
    saved.release();
    grads.release();
  }
};

class Block {
 public:
  virtual ~Block() = default;

  virtual const std::string& name() const = 0;
  virtual std::vector<NamedParameter> parameters() = 0;
  // Shape of the activation this block hands to the next one for microbatch `mb`
  // (empty shape for the last block, which produces the loss).
  virtual Shape output_shape(const MicrobatchData& mb) const = 0;
  virtual bool reads_data() const { return false; }    // first block: input from the data
  virtual bool computes_loss() const { return false; } // last block: output is the loss
  // The forward of a microbatch with backward_follows adds to the parameter gradients (the
  // chunked GPT head): whoever zeroes gradients per step must do so before such a forward,
  // and that forward must run where the gradients are kept.
  virtual bool accumulates_in_forward() const { return false; }
  // The part of the block's workspace that grows with a microbatch's rows only up to a bound
  // (the chunked GPT head's buffer of head_chunk_rows rows): bytes a row, and at most. The
  // planner scales the rest of the workspace with the microbatch. {0, 0}: none.
  struct RowBoundedBytes {
    std::int64_t per_row = 0;
    std::int64_t most = 0;
  };
  virtual RowBoundedBytes row_bounded_workspace() const { return {}; }
  // The class scores of the last forward kept in `state`, for loss blocks (accuracy).
  virtual const Tensor* logits(const BlockState&) const { return nullptr; }
  // Fills parameters from `seed` (each parameter from its own stream keyed by its name, so
  // any split of the model into stages gets the same values).
  virtual Status init_parameters(std::uint64_t seed) = 0;

  // `loss` receives the mean loss over the microbatch's positions when computes_loss().
  virtual Status forward(const MicrobatchData& mb, const Tensor* input, Tensor* output,
                         BlockState& state, double* loss) = 0;
  virtual Status backward_input(const MicrobatchData& mb, const Tensor* input,
                                const Tensor* doutput, Tensor* dinput, BlockState& state) = 0;
  virtual Status backward_weight(const MicrobatchData& mb, const Tensor* input,
                                 const Tensor* doutput, BlockState& state) = 0;
};

}  // namespace spw
