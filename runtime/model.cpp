#include "runtime/model.hpp"

#include "runtime/mlp_blocks.hpp"

namespace spw {

std::int64_t ModelSpec::block_count() const {
  if (kind == "gpt") return gpt.layers + 2;
  return dims.size() >= 2 ? static_cast<std::int64_t>(dims.size()) - 1 : 0;
}

std::vector<std::string> ModelSpec::block_names() const {
  std::vector<std::string> names;
  if (kind == "gpt") {
    names.push_back("embedding");
    for (std::int64_t i = 0; i < gpt.layers; ++i) names.push_back("blocks." + std::to_string(i));
    names.push_back("head");
  } else {
    for (std::int64_t i = 0; i < block_count(); ++i) names.push_back("layers." + std::to_string(i));
  }
  return names;
}

std::string ModelSpec::describe() const {
  if (kind == "gpt") {
    return "gpt layers=" + std::to_string(gpt.layers) + " d_model=" + std::to_string(gpt.d_model) +
           " heads=" + std::to_string(gpt.heads) + " seq=" + std::to_string(gpt.seq) +
           " vocab=" + std::to_string(gpt.vocab);
  }
  std::string text = kind + " dims=";
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) text += '-';
    text += std::to_string(dims[i]);
  }
  return text;
}

Shape ModelSpec::activation_shape(std::int64_t block, const MicrobatchData& mb) const {
  if (block < 0 || block + 1 >= block_count()) return {};
  if (kind == "gpt") return {mb.rows(), gpt.d_model};
  return {mb.samples, dims[static_cast<std::size_t>(block) + 1]};
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
  auto model = std::unique_ptr<Model>(new Model());
  model->spec_ = spec;
  model->first_ = first;
  for (std::int64_t b = first; b <= last; ++b) {
    Result<std::unique_ptr<Block>> block = Status();
    if (spec.kind == "mlp") {
      block = make_mlp_layer(spec.dims, static_cast<std::size_t>(b));
    } else if (b == 0) {
      block = make_gpt_embedding(spec.gpt);
    } else if (b == count - 1) {
      block = make_gpt_head(spec.gpt);
    } else {
      block = make_transformer_block(spec.gpt, b - 1);
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
