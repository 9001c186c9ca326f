// How trainable tensors are handed between models, optimizers and checkpoints. The name is
// the PyTorch state_dict key and the shapes are PyTorch's, so a checkpoint written from this
// list reads like a state_dict in Python and a PyTorch model can be checked against ours.
#pragma once

#include <string>

#include "kernels/tensor.hpp"

namespace spw {

struct NamedParameter {
  std::string name;         // state_dict key, e.g. "blocks.0.attn.qkv.weight"
  Tensor* value = nullptr;  // owned by the model; [out, in] for Linear weights, [n] for biases
  Tensor* grad = nullptr;   // same shape as value; may be null where only values are needed
};

}  // namespace spw
