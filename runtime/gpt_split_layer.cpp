#include "runtime/gpt_split_layer.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/ops/attention.hpp"
#include "kernels/ops/layernorm.hpp"
#include "kernels/ops/linear.hpp"
#include "kernels/ops/residual.hpp"
#include "runtime/gpt_layer_tail.hpp"
#include "runtime/parameter_store.hpp"

namespace spw {

namespace {

// Where the three planes of the front's output (and of its gradient) start, in floats.
struct Planes {
  std::int64_t rows = 0, d = 0, front_width = 0;
  std::int64_t x() const { return 0; }
  std::int64_t ln1() const { return rows * d; }
  std::int64_t heads() const { return 2 * rows * d; }
  std::int64_t floats() const { return rows * (2 * d + front_width); }
};

Planes planes_of(const GptShape& shape, std::int64_t front_heads, const MicrobatchData& mb) {
  return {mb.rows(), shape.d_model, front_heads * (shape.d_model / shape.heads)};
}

// A view of a flat buffer from `offset` floats on, as `shape`. The buffers a block reads (its
// input, the gradient of its output) are const to it, and views of them are only read.
Tensor view(const Tensor& flat, std::int64_t offset, const Shape& shape) {
  return Tensor::borrow(const_cast<float*>(flat.data()) + offset, shape);
}

Status check_flat(const std::string& block, const char* what, const Tensor* t,
                  const Planes& p) {
  if (t == nullptr || t->numel() != p.floats()) {
    return error(StatusCode::shape_mismatch,
                 block + ": " + what + " has " + (t ? std::to_string(t->numel()) : "no") +
                     " floats, expected " + std::to_string(p.floats()) + " (x, LN1(x) and " +
                     std::to_string(p.front_width) + " columns of heads for " +
                     std::to_string(p.rows) + " rows)");
  }
  return Status::success();
}

// Columns [first, first + width) of `from` [rows, from_cols] into columns [to_first, ..) of
// `to` [rows, to_cols].
void copy_columns(const float* from, std::int64_t from_cols, std::int64_t first, float* to,
                  std::int64_t to_cols, std::int64_t to_first, std::int64_t width,
                  std::int64_t rows) {
  for (std::int64_t r = 0; r < rows; ++r) {
    std::copy_n(from + r * from_cols + first, width, to + r * to_cols + to_first);
  }
}

enum class QkvTensor { weight, bias };

// Heads [first_head, first_head + heads)' share of layer `index`'s fused qkv weight or bias,
// which the unsplit layer holds as one tensor of 3 d rows, Q | K | V: checkpoints store that
// tensor, whatever the split.
TensorPart qkv_part(const GptShape& shape, std::int64_t index, QkvTensor tensor,
                    std::int64_t first_head, std::int64_t heads) {
  const std::int64_t d = shape.d_model, hd = d / shape.heads;
  const bool weight = tensor == QkvTensor::weight;
  TensorPart part;
  part.whole = "blocks." + std::to_string(index) + ".attn.qkv." + (weight ? "weight" : "bias");
  part.whole_shape =
      weight ? std::vector<std::int64_t>{3 * d, d} : std::vector<std::int64_t>{3 * d};
  for (std::int64_t plane = 0; plane < 3; ++plane) {
    part.rows.push_back({plane * d + first_head * hd, plane * d + (first_head + heads) * hd});
  }
  return part;
}

// A part of a weight, initialised as the rows it holds of its whole tensor drawn from that
// tensor's stream: what the unsplit layer starts from.
Status init_rows_of_whole(Tensor& dst, const TensorPart& part, std::uint64_t seed) {
  const std::int64_t cols = dst.numel() / dst.shape()[0];
  SPW_ASSIGN_OR_RETURN(Tensor whole,
                       Tensor::zeros({part.whole_shape[0], cols}, MemoryCategory::workspace));
  fill_normal(whole, kGptInitStd, seed, part.whole);
  float* to = dst.data();
  for (const RowRange& r : part.rows) {
    to = std::copy(whole.data() + r.begin * cols, whole.data() + r.end * cols, to);
  }
  return Status::success();
}

class TransformerFront final : public Block {
 public:
  TransformerFront(const GptShape& shape, std::int64_t index, std::int64_t front_heads)
      : shape_(shape),
        index_(index),
        heads_(front_heads),
        name_("blocks." + std::to_string(index) + ".front") {}

  Status create() {
    const std::int64_t d = shape_.d_model, width = heads_ * (d / shape_.heads);
    const std::string p = "blocks." + std::to_string(index_) + ".";
    SPW_ASSIGN_OR_RETURN(ln1_w_, params_.add(p + "ln1.weight", {d}));
    SPW_ASSIGN_OR_RETURN(ln1_b_, params_.add(p + "ln1.bias", {d}));
    SPW_ASSIGN_OR_RETURN(
        qkv_w_, params_.add(p + "attn.qkv_front.weight", {3 * width, d},
                            qkv_part(shape_, index_, QkvTensor::weight, 0, heads_)));
    SPW_ASSIGN_OR_RETURN(
        qkv_b_, params_.add(p + "attn.qkv_front.bias", {3 * width},
                            qkv_part(shape_, index_, QkvTensor::bias, 0, heads_)));
    return Status::success();
  }

  const std::string& name() const override { return name_; }
  std::vector<NamedParameter> parameters() override { return params_.named(); }
  Shape output_shape(const MicrobatchData& mb) const override {
    return split_layer_activation_shape(shape_, heads_, mb);
  }

  Status init_parameters(std::uint64_t seed) override {
    params_.value(ln1_w_).fill(1.0f);
    params_.value(ln1_b_).fill(0.0f);
    params_.value(qkv_b_).fill(0.0f);
    return init_rows_of_whole(params_.value(qkv_w_), *params_.part(qkv_w_), seed);
  }

  Status forward(const MicrobatchData& mb, const Tensor* input, Tensor* output,
                 BlockState& state, double*) override {
    const Planes p = planes_of(shape_, heads_, mb);
    SPW_TRY(check_flat(name_, "output", output, p));
    const Tensor& x = *input;
    Stash& s = state.saved;
    SPW_ASSIGN_OR_RETURN(Tensor * ln1, s.get(kLn1, {p.rows, p.d}));
    SPW_ASSIGN_OR_RETURN(Tensor * mean1, s.get(kMean1, {p.rows}));
    SPW_ASSIGN_OR_RETURN(Tensor * rstd1, s.get(kRstd1, {p.rows}));
    SPW_ASSIGN_OR_RETURN(Tensor * qkv, s.get(kQkv, {p.rows, 3 * p.front_width}));
    SPW_ASSIGN_OR_RETURN(Tensor * attn, s.get(kAttn, {p.rows, p.front_width}));
    SPW_ASSIGN_OR_RETURN(Tensor * lse, s.get(kLse, {mb.samples, heads_, mb.seq}));
    SPW_TRY(ops::layernorm_forward(x, params_.value(ln1_w_), params_.value(ln1_b_),
                                   shape_.ln_eps, *ln1, *mean1, *rstd1));
    SPW_TRY(ops::linear_forward(*ln1, params_.value(qkv_w_), &params_.value(qkv_b_), *qkv));
    SPW_TRY(ops::attention_forward(*qkv, mb.samples, mb.seq, heads_, *attn, *lse));
    float* out = output->data();
    std::copy_n(x.data(), p.rows * p.d, out + p.x());
    std::copy_n(ln1->data(), p.rows * p.d, out + p.ln1());
    std::copy_n(attn->data(), p.rows * p.front_width, out + p.heads());
    return Status::success();
  }

  // doutput holds dL/dx from the back's residual path, dL/da from the back's heads and
  // dL/do_f; dL/dx = that first plane + LN1'(dL/da + qkv_f'(attention'(dL/do_f))).
  Status backward_input(const MicrobatchData& mb, const Tensor* input, const Tensor* doutput,
                        Tensor* dinput, BlockState& state) override {
    const Planes p = planes_of(shape_, heads_, mb);
    SPW_TRY(check_flat(name_, "output gradient", doutput, p));
    Stash& s = state.saved;
    SPW_ASSIGN_OR_RETURN(Tensor * dqkv, state.grads.get(kDqkv, {p.rows, 3 * p.front_width}));
    SPW_ASSIGN_OR_RETURN(Tensor * dln1, state.grads.get(kDln1, {p.rows, p.d}));
    SPW_TRY(ops::attention_backward(view(*doutput, p.heads(), {p.rows, p.front_width}),
                                    s.at(kQkv), s.at(kAttn), s.at(kLse), mb.samples, mb.seq,
                                    heads_, *dqkv));
    SPW_TRY(ops::linear_backward_input(*dqkv, params_.value(qkv_w_), *dln1));
    SPW_TRY(ops::accumulate(*dln1, view(*doutput, p.ln1(), {p.rows, p.d})));
    SPW_TRY(ops::layernorm_backward_input(*dln1, *input, params_.value(ln1_w_), s.at(kMean1),
                                          s.at(kRstd1), *dinput));
    return ops::accumulate(*dinput, view(*doutput, p.x(), {p.rows, p.d}));
  }

  Status backward_weight(const MicrobatchData&, const Tensor* input, const Tensor*,
                         BlockState& state) override {
    Stash& s = state.saved;
    Stash& gs = state.grads;
    SPW_TRY(ops::layernorm_backward_weight(gs.at(kDln1), *input, s.at(kMean1), s.at(kRstd1),
                                           params_.grad(ln1_w_), params_.grad(ln1_b_)));
    return ops::linear_backward_weight(gs.at(kDqkv), s.at(kLn1), params_.grad(qkv_w_),
                                       &params_.grad(qkv_b_));
  }

 private:
  enum SavedSlot : std::size_t { kLn1, kMean1, kRstd1, kQkv, kAttn, kLse };
  enum GradSlot : std::size_t { kDqkv, kDln1 };

  GptShape shape_;
  std::int64_t index_;
  std::int64_t heads_;
  std::string name_;
  ParameterStore params_;
  std::size_t ln1_w_ = 0, ln1_b_ = 0, qkv_w_ = 0, qkv_b_ = 0;
};

class TransformerBack final : public Block {
 public:
  TransformerBack(const GptShape& shape, std::int64_t index, std::int64_t front_heads)
      : shape_(shape),
        index_(index),
        front_heads_(front_heads),
        name_("blocks." + std::to_string(index) + ".back") {}

  Status create() {
    const std::int64_t d = shape_.d_model;
    const std::int64_t width = d - front_heads_ * (d / shape_.heads);
    const std::string p = "blocks." + std::to_string(index_) + ".";
    const std::int64_t back_heads = shape_.heads - front_heads_;
    SPW_ASSIGN_OR_RETURN(
        qkv_w_, params_.add(p + "attn.qkv_back.weight", {3 * width, d},
                            qkv_part(shape_, index_, QkvTensor::weight, front_heads_, back_heads)));
    SPW_ASSIGN_OR_RETURN(
        qkv_b_, params_.add(p + "attn.qkv_back.bias", {3 * width},
                            qkv_part(shape_, index_, QkvTensor::bias, front_heads_, back_heads)));
    return tail_.create(params_, p, d);
  }

  const std::string& name() const override { return name_; }
  std::vector<NamedParameter> parameters() override { return params_.named(); }
  Shape output_shape(const MicrobatchData& mb) const override {
    return {mb.rows(), shape_.d_model};
  }

  Status init_parameters(std::uint64_t seed) override {
    params_.value(qkv_b_).fill(0.0f);
    tail_.init_parameters(params_, seed);
    return init_rows_of_whole(params_.value(qkv_w_), *params_.part(qkv_w_), seed);
  }

  Status forward(const MicrobatchData& mb, const Tensor* input, Tensor* output,
                 BlockState& state, double*) override {
    const Planes p = planes_of(shape_, front_heads_, mb);
    SPW_TRY(check_flat(name_, "input", input, p));
    const std::int64_t n = p.rows, d = p.d, width = d - p.front_width;
    Stash& s = state.saved;
    SPW_ASSIGN_OR_RETURN(Tensor * qkv, s.get(kQkv, {n, 3 * width}));
    SPW_ASSIGN_OR_RETURN(Tensor * heads, s.get(kHeads, {n, width}));
    SPW_ASSIGN_OR_RETURN(Tensor * lse, s.get(kLse, {mb.samples, back_heads(), mb.seq}));
    SPW_ASSIGN_OR_RETURN(Tensor * attn, tail_.heads_output(s, n, d));
    SPW_TRY(ops::linear_forward(view(*input, p.ln1(), {n, d}), params_.value(qkv_w_),
                                &params_.value(qkv_b_), *qkv));
    SPW_TRY(ops::attention_forward(*qkv, mb.samples, mb.seq, back_heads(), *heads, *lse));
    // [o_f | o_b]: the heads in the unsplit layer's column order, for the projection.
    copy_columns(input->data() + p.heads(), p.front_width, 0, attn->data(), d, 0, p.front_width,
                 n);
    copy_columns(heads->data(), width, 0, attn->data(), d, p.front_width, width, n);
    return tail_.forward(params_, shape_.ln_eps, s, view(*input, p.x(), {n, d}), *output);
  }

  // dinput: dL/dx along the residual path (dx2), dL/da through the back's heads, dL/do_f.
  Status backward_input(const MicrobatchData& mb, const Tensor*, const Tensor* doutput,
                        Tensor* dinput, BlockState& state) override {
    const Planes p = planes_of(shape_, front_heads_, mb);
    SPW_TRY(check_flat(name_, "input gradient", dinput, p));
    const std::int64_t n = p.rows, d = p.d, width = d - p.front_width;
    SPW_ASSIGN_OR_RETURN(Tensor * dqkv, state.grads.get(kDqkv, {n, 3 * width}));
    SPW_ASSIGN_OR_RETURN(Tensor * dheads, scratch_.get(kScratchHeads, {n, width}));
    SPW_TRY(tail_.backward_input(params_, state, scratch_, *doutput));
    const float* dattn = tail_.heads_gradient(scratch_).data();
    float* out = dinput->data();
    copy_columns(dattn, d, 0, out + p.heads(), p.front_width, 0, p.front_width, n);
    copy_columns(dattn, d, p.front_width, dheads->data(), width, 0, width, n);
    const Stash& s = state.saved;
    SPW_TRY(ops::attention_backward(*dheads, s.at(kQkv), s.at(kHeads), s.at(kLse), mb.samples,
                                    mb.seq, back_heads(), *dqkv));
    Tensor dln1 = view(*dinput, p.ln1(), {n, d});
    SPW_TRY(ops::linear_backward_input(*dqkv, params_.value(qkv_w_), dln1));
    std::copy_n(tail_.residual_gradient(state).data(), n * d, out + p.x());
    return Status::success();
  }

  Status backward_weight(const MicrobatchData& mb, const Tensor* input, const Tensor* doutput,
                         BlockState& state) override {
    const Planes p = planes_of(shape_, front_heads_, mb);
    SPW_TRY(ops::linear_backward_weight(state.grads.at(kDqkv),
                                        view(*input, p.ln1(), {p.rows, p.d}),
                                        params_.grad(qkv_w_), &params_.grad(qkv_b_)));
    return tail_.backward_weight(params_, state, *doutput);
  }

 private:
  enum SavedSlot : std::size_t { kQkv, kHeads, kLse, kTailSaved };
  enum GradSlot : std::size_t { kDqkv, kTailGrads };
  enum ScratchSlot : std::size_t { kScratchHeads, kTailScratch };

  std::int64_t back_heads() const { return shape_.heads - front_heads_; }

  GptShape shape_;
  std::int64_t index_;
  std::int64_t front_heads_;
  std::string name_;
  ParameterStore params_;
  Stash scratch_{MemoryCategory::workspace};
  GptLayerTail tail_{kTailSaved, kTailGrads, kTailScratch};
  std::size_t qkv_w_ = 0, qkv_b_ = 0;
};

template <class B>
Result<std::unique_ptr<Block>> created(std::unique_ptr<B> block) {
  SPW_TRY(block->create());
  return std::unique_ptr<Block>(std::move(block));
}

}  // namespace

Status check_layer_split(const GptShape& shape, std::int64_t index, std::int64_t front_heads) {
  if (index < 0 || index >= shape.layers) {
    return error(StatusCode::invalid_argument,
                 "layer " + std::to_string(index) + " to split is not one of the model's " +
                     std::to_string(shape.layers) + " layers (0 .. " +
                     std::to_string(shape.layers - 1) + ")");
  }
  if (front_heads < 1 || front_heads >= shape.heads) {
    return error(StatusCode::invalid_argument,
                 "layer " + std::to_string(index) + " split after " +
                     std::to_string(front_heads) + " heads: its front needs 1 to " +
                     std::to_string(shape.heads - 1) + " of its " + std::to_string(shape.heads) +
                     " heads");
  }
  return Status::success();
}

Shape split_layer_activation_shape(const GptShape& shape, std::int64_t front_heads,
                                   const MicrobatchData& mb) {
  return {planes_of(shape, front_heads, mb).floats()};
}

Result<std::unique_ptr<Block>> make_transformer_front(const GptShape& shape, std::int64_t index,
                                                      std::int64_t front_heads) {
  SPW_TRY(check_layer_split(shape, index, front_heads));
  return created(std::make_unique<TransformerFront>(shape, index, front_heads));
}

Result<std::unique_ptr<Block>> make_transformer_back(const GptShape& shape, std::int64_t index,
                                                     std::int64_t front_heads) {
  SPW_TRY(check_layer_split(shape, index, front_heads));
  return created(std::make_unique<TransformerBack>(shape, index, front_heads));
}

}  // namespace spw
