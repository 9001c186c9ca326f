// The blocks of an MLP classifier: one block per Linear layer, ReLU after every layer but
// the last, whose block also computes the softmax cross-entropy. Parameters are named
// layers.{i}.weight / layers.{i}.bias, initialised as torch.nn.Linear does by default.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/block.hpp"

namespace spw {

// Layer `index` maps dims[index] -> dims[index + 1]; the last layer computes the loss.
Result<std::unique_ptr<Block>> make_mlp_layer(const std::vector<std::int64_t>& dims,
                                              std::size_t index);

}  // namespace spw
