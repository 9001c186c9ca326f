#include "runtime/gpt_blocks.hpp"

#include <algorithm>
#include <span>

#include "kernels/ops/attention.hpp"
#include "kernels/ops/cross_entropy.hpp"
#include "kernels/ops/embedding.hpp"
#include "kernels/ops/layernorm.hpp"
#include "kernels/ops/linear.hpp"
#include "kernels/ops/residual.hpp"
#include "runtime/gpt_layer_tail.hpp"
#include "runtime/parameter_store.hpp"

namespace spw {

namespace {

std::span<const std::int32_t> tokens_of(const MicrobatchData& mb, const std::int32_t* ids) {
  return {ids, static_cast<std::size_t>(mb.rows())};
}

Status missing(const std::string& block, const char* what) {
  return error(StatusCode::invalid_argument, block + ": " + what + " is missing");
}

class GptEmbedding final : public Block {
 public:
  explicit GptEmbedding(const GptShape& shape) : shape_(shape) {}

  Status create() {
    SPW_ASSIGN_OR_RETURN(tok_, params_.add("tok_emb.weight", {shape_.vocab, shape_.d_model}));
    SPW_ASSIGN_OR_RETURN(pos_, params_.add("pos_emb.weight", {shape_.seq, shape_.d_model}));
    return Status::success();
  }

  const std::string& name() const override { return name_; }
  std::vector<NamedParameter> parameters() override { return params_.named(); }
  Shape output_shape(const MicrobatchData& mb) const override {
    return {mb.rows(), shape_.d_model};
  }
  bool reads_data() const override { return true; }

  Status init_parameters(std::uint64_t seed) override {
    for (std::size_t i = 0; i < params_.size(); ++i) {
      fill_normal(params_.value(i), kGptInitStd, seed, params_.name(i));
    }
    return Status::success();
  }

  Status forward(const MicrobatchData& mb, const Tensor*, Tensor* output, BlockState&,
                 double*) override {
    if (mb.tokens == nullptr) return missing(name_, "the microbatch's tokens");
    return ops::embedding_forward(tokens_of(mb, mb.tokens), mb.samples, mb.seq,
                                  params_.value(tok_), params_.value(pos_), *output);
  }

  Status backward_input(const MicrobatchData&, const Tensor*, const Tensor*, Tensor*,
                        BlockState&) override {
    return Status::success();  // token ids have no gradient
  }

  Status backward_weight(const MicrobatchData& mb, const Tensor*, const Tensor* doutput,
                         BlockState&) override {
    return ops::embedding_backward_weight(tokens_of(mb, mb.tokens), mb.samples, mb.seq, *doutput,
                                          params_.grad(tok_), params_.grad(pos_));
  }

 private:
  GptShape shape_;
  std::string name_ = "embedding";
  ParameterStore params_;
  std::size_t tok_ = 0, pos_ = 0;
};

// x2 = x + proj(attention(qkv(LN1(x)))); y = x2 + fc2(gelu(fc1(LN2(x2)))); from the
// projection on in GptLayerTail.
class TransformerBlock final : public Block {
 public:
  TransformerBlock(const GptShape& shape, std::int64_t index)
      : shape_(shape), name_("blocks." + std::to_string(index)) {}

  Status create() {
    const std::int64_t d = shape_.d_model;
    const std::string p = name_ + ".";
    SPW_ASSIGN_OR_RETURN(ln1_w_, params_.add(p + "ln1.weight", {d}));
    SPW_ASSIGN_OR_RETURN(ln1_b_, params_.add(p + "ln1.bias", {d}));
    SPW_ASSIGN_OR_RETURN(qkv_w_, params_.add(p + "attn.qkv.weight", {3 * d, d}));
    SPW_ASSIGN_OR_RETURN(qkv_b_, params_.add(p + "attn.qkv.bias", {3 * d}));
    return tail_.create(params_, p, d);
  }

  const std::string& name() const override { return name_; }
  std::vector<NamedParameter> parameters() override { return params_.named(); }
  Shape output_shape(const MicrobatchData& mb) const override {
    return {mb.rows(), shape_.d_model};
  }

  Status init_parameters(std::uint64_t seed) override {
    fill_normal(params_.value(qkv_w_), kGptInitStd, seed, params_.name(qkv_w_));
    params_.value(ln1_b_).fill(0.0f);
    params_.value(qkv_b_).fill(0.0f);
    params_.value(ln1_w_).fill(1.0f);
    tail_.init_parameters(params_, seed);
    return Status::success();
  }

  Status forward(const MicrobatchData& mb, const Tensor* input, Tensor* output,
                 BlockState& state, double*) override {
    const Tensor& x = *input;
    const std::int64_t n = mb.rows(), d = shape_.d_model;
    Stash& s = state.saved;
    SPW_ASSIGN_OR_RETURN(Tensor * ln1, s.get(kLn1, {n, d}));
    SPW_ASSIGN_OR_RETURN(Tensor * mean1, s.get(kMean1, {n}));
    SPW_ASSIGN_OR_RETURN(Tensor * rstd1, s.get(kRstd1, {n}));
    SPW_ASSIGN_OR_RETURN(Tensor * qkv, s.get(kQkv, {n, 3 * d}));
    SPW_ASSIGN_OR_RETURN(Tensor * lse, s.get(kLse, {mb.samples, shape_.heads, mb.seq}));
    SPW_ASSIGN_OR_RETURN(Tensor * attn, tail_.heads_output(s, n, d));

    SPW_TRY(ops::layernorm_forward(x, params_.value(ln1_w_), params_.value(ln1_b_),
                                   shape_.ln_eps, *ln1, *mean1, *rstd1));
    SPW_TRY(ops::linear_forward(*ln1, params_.value(qkv_w_), &params_.value(qkv_b_), *qkv));
    SPW_TRY(ops::attention_forward(*qkv, mb.samples, mb.seq, shape_.heads, *attn, *lse));
    return tail_.forward(params_, shape_.ln_eps, s, x, *output);
  }

  Status backward_input(const MicrobatchData& mb, const Tensor* input, const Tensor* doutput,
                        Tensor* dinput, BlockState& state) override {
    const std::int64_t n = mb.rows(), d = shape_.d_model;
    Stash& s = state.saved;
    Stash& gs = state.grads;
    SPW_ASSIGN_OR_RETURN(Tensor * dqkv, gs.get(kDqkv, {n, 3 * d}));
    SPW_ASSIGN_OR_RETURN(Tensor * dln1, gs.get(kDln1, {n, d}));
    SPW_TRY(tail_.backward_input(params_, state, scratch_, *doutput));
    // Attention branch: dx = dx2 + LN1'(qkv'(attention'(proj'(dx2)))).
    SPW_TRY(ops::attention_backward(tail_.heads_gradient(scratch_), s.at(kQkv),
                                    s.at(kAttn), s.at(kLse), mb.samples, mb.seq, shape_.heads,
                                    *dqkv));
    SPW_TRY(ops::linear_backward_input(*dqkv, params_.value(qkv_w_), *dln1));
    SPW_TRY(ops::layernorm_backward_input(*dln1, *input, params_.value(ln1_w_),
                                          s.at(kMean1), s.at(kRstd1), *dinput));
    return ops::accumulate(*dinput, tail_.residual_gradient(state));
  }

  Status backward_weight(const MicrobatchData&, const Tensor* input, const Tensor* doutput,
                         BlockState& state) override {
    Stash& s = state.saved;
    Stash& gs = state.grads;
    // Newest gradient first: backward_input wrote dln1 last and the block's output gradient
    // came first, so in this order each product reads its dy while it is likeliest to be in
    // cache. Each parameter's gradient is its own, so the order changes no result.
    SPW_TRY(ops::layernorm_backward_weight(gs.at(kDln1), *input, s.at(kMean1), s.at(kRstd1),
                                           params_.grad(ln1_w_), params_.grad(ln1_b_)));
    SPW_TRY(ops::linear_backward_weight(gs.at(kDqkv), s.at(kLn1), params_.grad(qkv_w_),
                                        &params_.grad(qkv_b_)));
    return tail_.backward_weight(params_, state, *doutput);
  }

 private:
  // The saved heads' output sits in the tail's first slot, kAttn.
  enum SavedSlot : std::size_t { kLn1, kMean1, kRstd1, kQkv, kLse, kAttn };
  enum GradSlot : std::size_t { kDqkv, kDln1, kTailGrads };

  GptShape shape_;
  std::string name_;
  ParameterStore params_;
  Stash scratch_{MemoryCategory::workspace};
  GptLayerTail tail_{kAttn, kTailGrads, 0};
  std::size_t ln1_w_ = 0, ln1_b_ = 0, qkv_w_ = 0, qkv_b_ = 0;
};

// logits = head(LN_f(x)); loss = mean cross-entropy over the microbatch's positions.
// With shape.head_chunk_rows the logits are computed a chunk of rows at a time (gpt_blocks.hpp).
class GptHead final : public Block {
 public:
  explicit GptHead(const GptShape& shape) : shape_(shape) {}

  Status create() {
    SPW_ASSIGN_OR_RETURN(lnf_w_, params_.add("ln_f.weight", {shape_.d_model}));
    SPW_ASSIGN_OR_RETURN(lnf_b_, params_.add("ln_f.bias", {shape_.d_model}));
    SPW_ASSIGN_OR_RETURN(head_w_, params_.add("head.weight", {shape_.vocab, shape_.d_model}));
    return Status::success();
  }

  const std::string& name() const override { return name_; }
  std::vector<NamedParameter> parameters() override { return params_.named(); }
  Shape output_shape(const MicrobatchData&) const override { return {}; }
  bool computes_loss() const override { return true; }
  bool accumulates_in_forward() const override { return chunked(); }
  RowBoundedBytes row_bounded_workspace() const override {
    if (!chunked()) return {};
    const std::int64_t row = shape_.vocab * static_cast<std::int64_t>(sizeof(float));
    return {row, row * shape_.head_chunk_rows};
  }
  const Tensor* logits(const BlockState& state) const override {
    // Chunked, the head keeps no logits.
    if (chunked() || state.saved.slot_count() <= kLogits) return nullptr;
    return &state.saved.at(kLogits);
  }

  Status init_parameters(std::uint64_t seed) override {
    params_.value(lnf_w_).fill(1.0f);
    params_.value(lnf_b_).fill(0.0f);
    fill_normal(params_.value(head_w_), kGptInitStd, seed, params_.name(head_w_));
    return Status::success();
  }

  Status forward(const MicrobatchData& mb, const Tensor* input, Tensor*, BlockState& state,
                 double* loss) override {
    if (mb.targets == nullptr) return missing(name_, "the microbatch's targets");
    const std::int64_t n = mb.rows(), d = shape_.d_model;
    Stash& s = state.saved;
    SPW_ASSIGN_OR_RETURN(Tensor * ln, s.get(kLn, {n, d}));
    SPW_ASSIGN_OR_RETURN(Tensor * mean, s.get(kMean, {n}));
    SPW_ASSIGN_OR_RETURN(Tensor * rstd, s.get(kRstd, {n}));
    SPW_TRY(ops::layernorm_forward(*input, params_.value(lnf_w_), params_.value(lnf_b_),
                                   shape_.ln_eps, *ln, *mean, *rstd));
    if (chunked()) return forward_in_chunks(mb, *ln, state, loss);
    SPW_ASSIGN_OR_RETURN(Tensor * logits, s.get(kLogits, {n, shape_.vocab}));
    SPW_TRY(ops::linear_forward(*ln, params_.value(head_w_), nullptr, *logits));
    float mean_loss = 0;
    SPW_TRY(ops::cross_entropy_forward(*logits, tokens_of(mb, mb.targets), mean_loss));
    if (loss) *loss = mean_loss;
    return Status::success();
  }

  Status backward_input(const MicrobatchData& mb, const Tensor* input, const Tensor*,
                        Tensor* dinput, BlockState& state) override {
    Stash& s = state.saved;
    if (chunked()) {
      SPW_ASSIGN_OR_RETURN(const Tensor* dln, gradient_from_forward(mb, state));
      return ops::layernorm_backward_input(*dln, *input, params_.value(lnf_w_), s.at(kMean),
                                           s.at(kRstd), *dinput);
    }
    const std::int64_t n = mb.rows(), d = shape_.d_model;
    SPW_ASSIGN_OR_RETURN(Tensor * dln, state.grads.get(kDln, {n, d}));
    // The logits' gradient takes their place in the stash, where backward_weight reads it:
    // nothing reads the logits after this, and [rows, vocab] is the largest tensor a GPT
    // keeps (412 MB a 2,048-row microbatch at GPT-2's 50,257 ids), so a second one would
    // double the head's memory. The stash stays resident from here to backward_weight.
    Tensor& dlogits = s.at(kLogits);
    SPW_TRY(ops::cross_entropy_backward(dlogits, tokens_of(mb, mb.targets), mb.grad_scale,
                                        dlogits));
    SPW_TRY(ops::linear_backward_input(dlogits, params_.value(head_w_), *dln));
    return ops::layernorm_backward_input(*dln, *input, params_.value(lnf_w_), s.at(kMean),
                                         s.at(kRstd), *dinput);
  }

  Status backward_weight(const MicrobatchData& mb, const Tensor* input, const Tensor*,
                         BlockState& state) override {
    Stash& s = state.saved;
    const Tensor* dln = nullptr;
    if (chunked()) {
      SPW_ASSIGN_OR_RETURN(dln, gradient_from_forward(mb, state));  // head.weight's is done
    } else {
      SPW_TRY(ops::linear_backward_weight(s.at(kLogits), s.at(kLn), params_.grad(head_w_),
                                          nullptr));  // the logits' gradient, since backward_input
      dln = &state.grads.at(kDln);
    }
    return ops::layernorm_backward_weight(*dln, *input, s.at(kMean), s.at(kRstd),
                                          params_.grad(lnf_w_), params_.grad(lnf_b_));
  }

 private:
  // Unchunked, kLogits holds the logits, then their gradient. Chunked, a training forward
  // leaves the gradient at LN_f's output in kDlnFromForward and nothing else of [rows, ...].
  enum SavedSlot : std::size_t { kLn, kMean, kRstd, kLogits, kDlnFromForward = kLogits };
  enum GradSlot : std::size_t { kDln };

  bool chunked() const { return shape_.head_chunk_rows > 0; }

  // A chunk of rows at a time through a [chunk, vocab] buffer: the loss and, when a backward
  // follows, the logits' gradient in place, LN_f's output gradient for the backward and
  // head.weight's gradient (added now: nothing of the chunk is left to add it from later).
  Status forward_in_chunks(const MicrobatchData& mb, const Tensor& ln, BlockState& state,
                           double* loss) {
    const std::int64_t n = mb.rows(), d = shape_.d_model;
    const std::int64_t chunk = std::min(shape_.head_chunk_rows, n);
    SPW_ASSIGN_OR_RETURN(Tensor * buffer, scratch_.get(0, {chunk, shape_.vocab}, FirstTouch::none));
    Tensor* dln = nullptr;
    if (mb.backward_follows) {
      SPW_ASSIGN_OR_RETURN(dln, state.saved.get(kDlnFromForward, {n, d}, FirstTouch::none));
    }
    const std::span<const std::int32_t> targets = tokens_of(mb, mb.targets);
    const Tensor& weight = params_.value(head_w_);
    double loss_sum = 0;
    for (std::int64_t first = 0; first < n; first += chunk) {
      const std::int64_t rows = std::min(chunk, n - first);
      SPW_ASSIGN_OR_RETURN(const Tensor x, ln.rows(first, rows));
      SPW_ASSIGN_OR_RETURN(Tensor logits, buffer->rows(0, rows));
      const std::span<const std::int32_t> chunk_targets =
          targets.subspan(static_cast<std::size_t>(first), static_cast<std::size_t>(rows));
      SPW_TRY(ops::linear_forward(x, weight, nullptr, logits));
      if (dln == nullptr) {
        SPW_TRY(ops::cross_entropy_add_loss(logits, chunk_targets, loss_sum));
        continue;
      }
      SPW_TRY(ops::cross_entropy_loss_and_gradient(logits, chunk_targets, mb.grad_scale, logits,
                                                   loss_sum));
      SPW_ASSIGN_OR_RETURN(Tensor dx, dln->rows(first, rows));
      SPW_TRY(ops::linear_backward_input(logits, weight, dx));
      SPW_TRY(ops::linear_backward_weight(logits, x, params_.grad(head_w_), nullptr));
    }
    // A float mean, as cross_entropy_forward gives the unchunked head: the same bits.
    if (loss) *loss = static_cast<double>(static_cast<float>(loss_sum / static_cast<double>(n)));
    return Status::success();
  }

  Result<const Tensor*> gradient_from_forward(const MicrobatchData& mb, BlockState& state) {
    const Stash& s = state.saved;
    if (s.slot_count() <= kDlnFromForward ||
        s.at(kDlnFromForward).shape() != Shape{mb.rows(), shape_.d_model}) {
      return error(StatusCode::invalid_argument,
                   name_ +
                       ": a backward after a forward that was not told one follows "
                       "(MicrobatchData::backward_follows): with model.head_chunk_rows the "
                       "head computes its gradient in the forward");
    }
    return &s.at(kDlnFromForward);
  }

  GptShape shape_;
  std::string name_ = "head";
  ParameterStore params_;
  Stash scratch_{MemoryCategory::workspace};  // the chunked head's [chunk, vocab] buffer
  std::size_t lnf_w_ = 0, lnf_b_ = 0, head_w_ = 0;
};

template <class B>
Result<std::unique_ptr<Block>> created(std::unique_ptr<B> block) {
  SPW_TRY(block->create());
  return std::unique_ptr<Block>(std::move(block));
}

}  // namespace

Result<std::unique_ptr<Block>> make_gpt_embedding(const GptShape& shape) {
  return created(std::make_unique<GptEmbedding>(shape));
}

Result<std::unique_ptr<Block>> make_transformer_block(const GptShape& shape, std::int64_t index) {
  return created(std::make_unique<TransformerBlock>(shape, index));
}

Result<std::unique_ptr<Block>> make_gpt_head(const GptShape& shape) {
  return created(std::make_unique<GptHead>(shape));
}

}  // namespace spw
