// How trainable tensors are handed between models, optimizers and checkpoints. The name is
// the PyTorch state_dict key and the shapes are PyTorch's, so a checkpoint written from this
// list reads like a state_dict in Python and a PyTorch model can be checked against ours.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/tensor.hpp"

namespace spw {

// Rows [begin, end) of a tensor's first dimension.
struct RowRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  friend bool operator==(const RowRange&, const RowRange&) = default;
};

// A parameter that holds some rows of a bigger tensor: a layer split across two blocks
// (runtime/gpt_split_layer.hpp) gives each its heads' rows of the layer's QKV projection.
// Checkpoints store the whole tensor under its own key, so they do not depend on the split.
struct TensorPart {
  std::string whole;                      // state_dict key of the whole tensor
  std::vector<std::int64_t> whole_shape;  // its shape; the part's other dimensions match it
  std::vector<RowRange> rows;             // ascending, disjoint: the part's rows, in order
};

struct NamedParameter {
  std::string name;         // state_dict key, e.g. "blocks.0.attn.qkv.weight"
  Tensor* value = nullptr;  // owned by the model; [out, in] for Linear weights, [n] for biases
  Tensor* grad = nullptr;   // same shape as value; may be null where only values are needed
  // Set: checkpoints hold this parameter (and its optimizer state) as rows of part->whole.
  std::optional<TensorPart> part = std::nullopt;
};

}  // namespace spw
