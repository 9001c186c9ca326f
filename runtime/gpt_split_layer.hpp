// A transformer layer cut into two blocks, so that a pipeline stage boundary can fall inside
// it: a stage whose blocks cost a layer more or less than its neighbour's can take a few
// attention heads of the next layer instead of all or none of it.
//
//   front: a = LN1(x); its first k heads' attention o_f = attention(qkv_f(a)).
//   back:  the other H - k heads' o_b = attention(qkv_b(a)); x2 = x + proj([o_f | o_b]);
//          y = x2 + fc2(gelu(fc1(LN2(x2)))).
//
// Together they compute what make_transformer_block computes (the same parameters, their qkv
// rows split by head) up to the rounding of the smaller products. The front hands the back
// one flat buffer of three planes, [n, d] x, [n, d] a and [n, k hd] o_f, and receives the
// gradients of those three; LN1's gradient from the back's heads thus travels back to the
// front, which holds LN1, so no parameter is shared between the two blocks.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/block.hpp"
#include "runtime/gpt_blocks.hpp"

namespace spw {

// The flat activation the front of a layer split after `front_heads` heads hands the back.
Shape split_layer_activation_shape(const GptShape& shape, std::int64_t front_heads,
                                   const MicrobatchData& mb);

// invalid_argument naming the layer when `index` is not one of shape's layers or
// `front_heads` is not in 1 .. shape.heads - 1.
Status check_layer_split(const GptShape& shape, std::int64_t index, std::int64_t front_heads);

// Layer `index` split after its first `front_heads` heads (1 <= front_heads < shape.heads):
// the front is named "blocks.<index>.front", the back "blocks.<index>.back". invalid_argument
// naming the layer when front_heads is out of that range.
Result<std::unique_ptr<Block>> make_transformer_front(const GptShape& shape, std::int64_t index,
                                                      std::int64_t front_heads);
Result<std::unique_ptr<Block>> make_transformer_back(const GptShape& shape, std::int64_t index,
                                                     std::int64_t front_heads);

}  // namespace spw
