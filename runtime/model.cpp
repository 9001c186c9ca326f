#include "runtime/model.hpp"

#include <algorithm>

#include "runtime/gpt_split_layer.hpp"
#include "runtime/mlp_blocks.hpp"

namespace spw {

namespace {

// What block `block` of a gpt is.
struct GptBlock {
  enum class Kind { embedding, layer, front, back, head } kind = Kind::embedding;
  std::int64_t layer = -1;
  std::int64_t front_heads = 0;  // front and back
};

const LayerSplit* split_of(const ModelSpec& spec, std::int64_t layer) {
  for (const LayerSplit& split : spec.splits) {
    if (split.layer == layer) return &split;
  }
  return nullptr;
}

// Calls visit(block) for each block in order until it returns false. Walks the layers
// instead of building a list: activation_shape runs for every microbatch a stage receives.
template <class Visit>
void for_each_gpt_block(const ModelSpec& spec, Visit visit) {
  if (!visit(GptBlock{GptBlock::Kind::embedding})) return;
  for (std::int64_t i = 0; i < spec.gpt.layers; ++i) {
    if (const LayerSplit* split = split_of(spec, i)) {
      if (!visit(GptBlock{GptBlock::Kind::front, i, split->front_heads})) return;
      if (!visit(GptBlock{GptBlock::Kind::back, i, split->front_heads})) return;
    } else if (!visit(GptBlock{GptBlock::Kind::layer, i})) {
      return;
    }
  }
  visit(GptBlock{GptBlock::Kind::head});
}

std::vector<GptBlock> gpt_blocks(const ModelSpec& spec) {
  std::vector<GptBlock> blocks;
  for_each_gpt_block(spec, [&](const GptBlock& b) {
    blocks.push_back(b);
    return true;
  });
  return blocks;
}

// Block `index` (which must exist).
GptBlock gpt_block_at(const ModelSpec& spec, std::int64_t index) {
  GptBlock found;
  for_each_gpt_block(spec, [&](const GptBlock& b) {
    found = b;
    return index-- > 0;
  });
  return found;
}

Status check_splits(const ModelSpec& spec) {
  if (spec.splits.empty()) return Status::success();
  if (spec.kind != "gpt") {
    return error(StatusCode::invalid_argument, "only a gpt's layers can be split");
  }
  for (std::size_t i = 0; i < spec.splits.size(); ++i) {
    const LayerSplit& split = spec.splits[i];
    SPW_TRY(check_layer_split(spec.gpt, split.layer, split.front_heads));
    for (std::size_t j = 0; j < i; ++j) {
      if (spec.splits[j].layer == split.layer) {
        return error(StatusCode::invalid_argument,
                     "layer " + std::to_string(split.layer) + " is split twice");
      }
    }
  }
  return Status::success();
}

}  // namespace

std::int64_t ModelSpec::block_count() const {
  // Counted from the list the other members index, so that a spec whose splits Model::build
  // would refuse (a layer out of range, or split twice) cannot send them past its end.
  if (kind == "gpt") {
    std::int64_t count = 0;
    for_each_gpt_block(*this, [&](const GptBlock&) { return ++count > 0; });
    return count;
  }
  return dims.size() >= 2 ? static_cast<std::int64_t>(dims.size()) - 1 : 0;
}

std::vector<std::string> ModelSpec::block_names() const {
  std::vector<std::string> names;
  if (kind == "gpt") {
    for (const GptBlock& block : gpt_blocks(*this)) {
      const std::string layer = "blocks." + std::to_string(block.layer);
      switch (block.kind) {
        case GptBlock::Kind::embedding: names.push_back("embedding"); break;
        case GptBlock::Kind::layer: names.push_back(layer); break;
        case GptBlock::Kind::front: names.push_back(layer + ".front"); break;
        case GptBlock::Kind::back: names.push_back(layer + ".back"); break;
        case GptBlock::Kind::head: names.push_back("head"); break;
      }
    }
  } else {
    for (std::int64_t i = 0; i < block_count(); ++i) names.push_back("layers." + std::to_string(i));
  }
  return names;
}

std::string ModelSpec::describe() const {
  if (kind == "gpt") {
    return "gpt layers=" + std::to_string(gpt.layers) + " d_model=" + std::to_string(gpt.d_model) +
           " heads=" + std::to_string(gpt.heads) + " seq=" + std::to_string(gpt.seq) +
           " vocab=" + std::to_string(gpt.vocab) + head_text() + splits_text();
  }
  std::string text = kind + " dims=";
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) text += '-';
    text += std::to_string(dims[i]);
  }
  return text;
}

std::string ModelSpec::block_kind(std::int64_t block) const {
  if (kind == "gpt") {
    const GptBlock what = gpt_block_at(*this, block);
    if (what.kind == GptBlock::Kind::front) return "front:" + std::to_string(what.front_heads);
    if (what.kind == GptBlock::Kind::back) return "back:" + std::to_string(what.front_heads);
    if (what.kind == GptBlock::Kind::embedding) return "embedding";
    return what.kind == GptBlock::Kind::head ? "head" : "layer";
  }
  const auto at = static_cast<std::size_t>(block);
  std::string text = "dense " + std::to_string(dims[at]) + "-" + std::to_string(dims[at + 1]);
  if (block == 0) text += " input";
  if (block + 1 == block_count()) text += " loss";
  return text;
}

// The chunked head runs its passes at other costs, so a profile of one is not the other's.
std::string ModelSpec::head_text() const {
  if (gpt.head_chunk_rows == 0) return "";
  std::string text = " head_chunk_rows=";
  text += std::to_string(gpt.head_chunk_rows);
  return text;
}

std::string ModelSpec::splits_text() const {
  std::string text;
  for (const LayerSplit& split : splits) {
    text += (text.empty() ? " split=" : ",") + std::to_string(split.layer) + ":" +
            std::to_string(split.front_heads);
  }
  return text;
}

Shape ModelSpec::activation_shape(std::int64_t block, const MicrobatchData& mb) const {
  if (block < 0 || block + 1 >= block_count()) return {};
  if (kind == "gpt") {
    const GptBlock what = gpt_block_at(*this, block);
    if (what.kind == GptBlock::Kind::front) {
      return split_layer_activation_shape(gpt, what.front_heads, mb);
    }
    return {mb.rows(), gpt.d_model};
  }
  return {mb.samples, dims[static_cast<std::size_t>(block) + 1]};
}

std::int64_t ModelSpec::parameter_count(std::int64_t first, std::int64_t last) const {
  first = std::max<std::int64_t>(first, 0);
  last = std::min(last, block_count() - 1);
  std::int64_t count = 0;
  if (kind != "gpt") {
    for (std::int64_t b = first; b <= last; ++b) {
      const std::int64_t in = dims[static_cast<std::size_t>(b)];
      const std::int64_t out = dims[static_cast<std::size_t>(b) + 1];
      count += out * in + out;
    }
    return count;
  }
  const std::int64_t d = gpt.d_model;
  const std::int64_t head_width = gpt.heads > 0 ? d / gpt.heads : 0;
  // A split layer's qkv rows by head: 3 * width rows of d, and their biases.
  const auto qkv = [&](std::int64_t heads) { return 3 * heads * head_width * (d + 1); };
  const std::int64_t layer_norm = 2 * d;
  const std::int64_t tail = d * d + d + layer_norm + 4 * d * d + 4 * d + 4 * d * d + d;
  std::int64_t b = 0;
  for_each_gpt_block(*this, [&](const GptBlock& block) {
    if (b >= first) {
      switch (block.kind) {
        case GptBlock::Kind::embedding:
          count += (gpt.vocab + gpt.seq) * d;
          break;
        case GptBlock::Kind::layer:
          count += layer_norm + 3 * d * (d + 1) + tail;
          break;
        case GptBlock::Kind::front:
          count += layer_norm + qkv(block.front_heads);
          break;
        case GptBlock::Kind::back:
          count += qkv(gpt.heads - block.front_heads) + tail;
          break;
        case GptBlock::Kind::head:
          count += layer_norm + gpt.vocab * d;
          break;
      }
    }
    return ++b <= last;
  });
  return count;
}

Result<std::unique_ptr<Model>> Model::build(const ModelSpec& spec, std::int64_t first,
                                            std::int64_t last) {
  const std::int64_t count = spec.block_count();
  if (spec.kind != "gpt" && spec.kind != "mlp") {
    return error(StatusCode::invalid_argument,
                 "unknown model kind '" + spec.kind + "': use \"gpt\" or \"mlp\"");
  }
  if (count == 0) {
    return error(StatusCode::invalid_argument, "an mlp needs at least two widths in model.dims");
  }
  if (first < 0 || last >= count || first > last) {
    return error(StatusCode::invalid_argument,
                 "blocks [" + std::to_string(first) + ", " + std::to_string(last) +
                     "] are not a range of the model's " + std::to_string(count) + " blocks");
  }
  SPW_TRY(check_splits(spec));
  auto model = std::unique_ptr<Model>(new Model());
  model->spec_ = spec;
  model->first_ = first;
  const std::vector<GptBlock> gpt = spec.kind == "gpt" ? gpt_blocks(spec) : std::vector<GptBlock>{};
  for (std::int64_t b = first; b <= last; ++b) {
    Result<std::unique_ptr<Block>> block = Status();
    if (spec.kind == "mlp") {
      block = make_mlp_layer(spec.dims, static_cast<std::size_t>(b));
    } else {
      const GptBlock& what = gpt[static_cast<std::size_t>(b)];
      switch (what.kind) {
        case GptBlock::Kind::embedding: block = make_gpt_embedding(spec.gpt); break;
        case GptBlock::Kind::layer: block = make_transformer_block(spec.gpt, what.layer); break;
        case GptBlock::Kind::front:
          block = make_transformer_front(spec.gpt, what.layer, what.front_heads);
          break;
        case GptBlock::Kind::back:
          block = make_transformer_back(spec.gpt, what.layer, what.front_heads);
          break;
        case GptBlock::Kind::head: block = make_gpt_head(spec.gpt); break;
      }
    }
    if (!block.ok()) return block.status();
    model->blocks_.push_back(std::move(block).value());
  }
  return model;
}

std::vector<NamedParameter> Model::parameters() {
  std::vector<NamedParameter> all;
  for (auto& block : blocks_) {
    for (auto& p : block->parameters()) all.push_back(p);
  }
  return all;
}

std::size_t Model::parameter_count() {
  std::size_t n = 0;
  for (const auto& p : parameters()) n += static_cast<std::size_t>(p.value->numel());
  return n;
}

Status Model::init_parameters(std::uint64_t seed) {
  for (auto& block : blocks_) SPW_TRY(block->init_parameters(seed));
  return Status::success();
}

void Model::zero_grads() {
  for (auto& p : parameters()) p.grad->fill(0.0f);
}

}  // namespace spw
