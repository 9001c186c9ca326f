// A model is a sequence of blocks; a pipeline stage holds a contiguous range of them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/block.hpp"
#include "runtime/gpt_blocks.hpp"

namespace spw {

// A gpt layer cut into two blocks after its first `front_heads` attention heads
// (runtime/gpt_split_layer.hpp), so that a stage boundary can fall inside it.
struct LayerSplit {
  std::int64_t layer = 0;
  std::int64_t front_heads = 1;
  friend bool operator==(const LayerSplit&, const LayerSplit&) = default;
};

struct ModelSpec {
  std::string kind = "gpt";           // "gpt" or "mlp"
  GptShape gpt;                       // with kind "gpt"
  std::vector<std::int64_t> dims;     // with kind "mlp": layer widths, input first
  std::vector<LayerSplit> splits;     // with kind "gpt": by layer, each layer at most once

  // Blocks in the whole model: gpt layers + 2 (embedding, head) + one per split layer, mlp
  // dims.size() - 1.
  std::int64_t block_count() const;
  // Names of the blocks, in order ("embedding", "blocks.0", ..., "head", a split layer's two
  // blocks "blocks.3.front" and "blocks.3.back"; "layers.0", ...).
  std::vector<std::string> block_names() const;
  // What a profile is taken of: "gpt layers=8 d_model=256 heads=8 seq=128 vocab=256",
  // with " head_chunk_rows=256" when the head is chunked and " split=4:1" (layer:front
  // heads) when layers are split; "mlp dims=784-1024-10".
  std::string describe() const;
  // What block `block` is built as, without its place in the model: blocks of one kind run
  // the same kernels on the same shapes ("layer" for every unsplit gpt layer, "front:1" and
  // "back:1" for split ones, "embedding", "head"; an mlp layer's widths, with whether it
  // reads the input or computes the loss), so one profile of a kind stands for all of them.
  std::string block_kind(std::int64_t block) const;
  // Positions per sample (gpt: seq; mlp: 1) and elements of the input per sample.
  std::int64_t positions_per_sample() const { return kind == "gpt" ? gpt.seq : 1; }
  // Shape of the activation block `block` hands to the next block for `mb` (empty for the
  // last block): what a pipeline stage receives without holding the block that sends it.
  Shape activation_shape(std::int64_t block, const MicrobatchData& mb) const;
  // Parameters (elements) of blocks [first, last] without building them: what a rank can
  // check against its memory before it allocates any (Model::parameter_count once built).
  std::int64_t parameter_count(std::int64_t first, std::int64_t last) const;

 private:
  std::string head_text() const;
  std::string splits_text() const;
};

class Model {
 public:
  // Blocks [first, last] (inclusive) of the model `spec` describes, with zero parameters.
  static Result<std::unique_ptr<Model>> build(const ModelSpec& spec, std::int64_t first,
                                              std::int64_t last);
  static Result<std::unique_ptr<Model>> build(const ModelSpec& spec) {
    return build(spec, 0, spec.block_count() - 1);
  }

  const ModelSpec& spec() const { return spec_; }
  std::int64_t first_block() const { return first_; }
  std::size_t size() const { return blocks_.size(); }
  Block& block(std::size_t i) { return *blocks_[i]; }
  const Block& block(std::size_t i) const { return *blocks_[i]; }

  std::vector<NamedParameter> parameters();
  std::size_t parameter_count();
  Status init_parameters(std::uint64_t seed);
  void zero_grads();

 private:
  ModelSpec spec_;
  std::int64_t first_ = 0;
  std::vector<std::unique_ptr<Block>> blocks_;
};

}  // namespace spw
