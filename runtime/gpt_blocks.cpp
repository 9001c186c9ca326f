#include "runtime/gpt_blocks.hpp"

#include <span>

#include "kernels/ops/activation.hpp"
#include "kernels/ops/attention.hpp"
#include "kernels/ops/cross_entropy.hpp"
#include "kernels/ops/embedding.hpp"
#include "kernels/ops/layernorm.hpp"
#include "kernels/ops/linear.hpp"
#include "kernels/ops/residual.hpp"
#include "runtime/parameter_store.hpp"

namespace spw {

namespace {

constexpr double kInitStd = 0.02;

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
      fill_normal(params_.value(i), kInitStd, seed, params_.name(i));
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

// x = x + proj(attention(qkv(LN1(x)))); y = x + fc2(gelu(fc1(LN2(x)))).
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
    SPW_ASSIGN_OR_RETURN(proj_w_, params_.add(p + "attn.proj.weight", {d, d}));
    SPW_ASSIGN_OR_RETURN(proj_b_, params_.add(p + "attn.proj.bias", {d}));
    SPW_ASSIGN_OR_RETURN(ln2_w_, params_.add(p + "ln2.weight", {d}));
    SPW_ASSIGN_OR_RETURN(ln2_b_, params_.add(p + "ln2.bias", {d}));
    SPW_ASSIGN_OR_RETURN(fc1_w_, params_.add(p + "mlp.fc1.weight", {4 * d, d}));
    SPW_ASSIGN_OR_RETURN(fc1_b_, params_.add(p + "mlp.fc1.bias", {4 * d}));
    SPW_ASSIGN_OR_RETURN(fc2_w_, params_.add(p + "mlp.fc2.weight", {d, 4 * d}));
    SPW_ASSIGN_OR_RETURN(fc2_b_, params_.add(p + "mlp.fc2.bias", {d}));
    return Status::success();
  }

  const std::string& name() const override { return name_; }
  std::vector<NamedParameter> parameters() override { return params_.named(); }
  Shape output_shape(const MicrobatchData& mb) const override {
    return {mb.rows(), shape_.d_model};
  }

  Status init_parameters(std::uint64_t seed) override {
    for (std::size_t w : {qkv_w_, proj_w_, fc1_w_, fc2_w_}) {
      fill_normal(params_.value(w), kInitStd, seed, params_.name(w));
    }
    for (std::size_t b : {ln1_b_, qkv_b_, proj_b_, ln2_b_, fc1_b_, fc2_b_}) {
      params_.value(b).fill(0.0f);
    }
    params_.value(ln1_w_).fill(1.0f);
    params_.value(ln2_w_).fill(1.0f);
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
    SPW_ASSIGN_OR_RETURN(Tensor * attn, s.get(kAttn, {n, d}));
    SPW_ASSIGN_OR_RETURN(Tensor * lse, s.get(kLse, {mb.samples, shape_.heads, mb.seq}));
    SPW_ASSIGN_OR_RETURN(Tensor * x2, s.get(kX2, {n, d}));
    SPW_ASSIGN_OR_RETURN(Tensor * ln2, s.get(kLn2, {n, d}));
    SPW_ASSIGN_OR_RETURN(Tensor * mean2, s.get(kMean2, {n}));
    SPW_ASSIGN_OR_RETURN(Tensor * rstd2, s.get(kRstd2, {n}));
    SPW_ASSIGN_OR_RETURN(Tensor * h, s.get(kH, {n, 4 * d}));
    SPW_ASSIGN_OR_RETURN(Tensor * g, s.get(kG, {n, 4 * d}));

    SPW_TRY(ops::layernorm_forward(x, params_.value(ln1_w_), params_.value(ln1_b_),
                                   shape_.ln_eps, *ln1, *mean1, *rstd1));
    SPW_TRY(ops::linear_forward(*ln1, params_.value(qkv_w_), &params_.value(qkv_b_), *qkv));
    SPW_TRY(ops::attention_forward(*qkv, mb.samples, mb.seq, shape_.heads, *attn, *lse));
    SPW_TRY(ops::linear_forward_residual(*attn, params_.value(proj_w_), &params_.value(proj_b_),
                                         x, *x2));
    SPW_TRY(ops::layernorm_forward(*x2, params_.value(ln2_w_), params_.value(ln2_b_),
                                   shape_.ln_eps, *ln2, *mean2, *rstd2));
    SPW_TRY(ops::linear_forward(*ln2, params_.value(fc1_w_), &params_.value(fc1_b_), *h));
    SPW_TRY(ops::gelu_forward(*h, *g));
    return ops::linear_forward_residual(*g, params_.value(fc2_w_), &params_.value(fc2_b_), *x2,
                                        *output);
  }

  Status backward_input(const MicrobatchData& mb, const Tensor* input, const Tensor* doutput,
                        Tensor* dinput, BlockState& state) override {
    const Tensor& dy = *doutput;
    const std::int64_t n = mb.rows(), d = shape_.d_model;
    Stash& s = state.saved;
    Stash& gs = state.grads;
    SPW_ASSIGN_OR_RETURN(Tensor * dh, gs.get(kDh, {n, 4 * d}));
    SPW_ASSIGN_OR_RETURN(Tensor * dln2, gs.get(kDln2, {n, d}));
    SPW_ASSIGN_OR_RETURN(Tensor * dx2, gs.get(kDx2, {n, d}));
    SPW_ASSIGN_OR_RETURN(Tensor * dqkv, gs.get(kDqkv, {n, 3 * d}));
    SPW_ASSIGN_OR_RETURN(Tensor * dln1, gs.get(kDln1, {n, d}));
    SPW_ASSIGN_OR_RETURN(Tensor * dg, scratch_.get(kScratchWide, {n, 4 * d}));
    SPW_ASSIGN_OR_RETURN(Tensor * dnarrow, scratch_.get(kScratchNarrow, {n, d}));

    // MLP branch, then the residual joins: dx2 = dy + LN2'(fc1'(gelu'(fc2'(dy)))).
    SPW_TRY(ops::linear_backward_input(dy, params_.value(fc2_w_), *dg));
    SPW_TRY(ops::gelu_backward(*dg, s.at(kH), *dh));
    SPW_TRY(ops::linear_backward_input(*dh, params_.value(fc1_w_), *dln2));
    SPW_TRY(ops::layernorm_backward_input(*dln2, s.at(kX2), params_.value(ln2_w_), s.at(kMean2),
                                          s.at(kRstd2), *dnarrow));
    SPW_TRY(ops::residual_forward(dy, *dnarrow, *dx2));
    // Attention branch: dx = dx2 + LN1'(qkv'(attention'(proj'(dx2)))).
    SPW_TRY(ops::linear_backward_input(*dx2, params_.value(proj_w_), *dnarrow));
    SPW_TRY(ops::attention_backward(*dnarrow, s.at(kQkv), s.at(kAttn), s.at(kLse), mb.samples,
                                    mb.seq, shape_.heads, *dqkv));
    SPW_TRY(ops::linear_backward_input(*dqkv, params_.value(qkv_w_), *dln1));
    SPW_TRY(ops::layernorm_backward_input(*dln1, *input, params_.value(ln1_w_),
                                          s.at(kMean1), s.at(kRstd1), *dinput));
    return ops::accumulate(*dinput, *dx2);
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
    SPW_TRY(ops::linear_backward_weight(gs.at(kDx2), s.at(kAttn), params_.grad(proj_w_),
                                        &params_.grad(proj_b_)));
    SPW_TRY(ops::layernorm_backward_weight(gs.at(kDln2), s.at(kX2), s.at(kMean2), s.at(kRstd2),
                                           params_.grad(ln2_w_), params_.grad(ln2_b_)));
    SPW_TRY(ops::linear_backward_weight(gs.at(kDh), s.at(kLn2), params_.grad(fc1_w_),
                                        &params_.grad(fc1_b_)));
    return ops::linear_backward_weight(*doutput, s.at(kG), params_.grad(fc2_w_),
                                       &params_.grad(fc2_b_));
  }

 private:
  enum SavedSlot : std::size_t {
    kLn1, kMean1, kRstd1, kQkv, kAttn, kLse, kX2, kLn2, kMean2, kRstd2, kH, kG };
  enum GradSlot : std::size_t { kDh, kDln2, kDx2, kDqkv, kDln1 };
  enum ScratchSlot : std::size_t { kScratchWide, kScratchNarrow };

  GptShape shape_;
  std::string name_;
  ParameterStore params_;
  Stash scratch_{MemoryCategory::workspace};
  std::size_t ln1_w_ = 0, ln1_b_ = 0, qkv_w_ = 0, qkv_b_ = 0, proj_w_ = 0, proj_b_ = 0;
  std::size_t ln2_w_ = 0, ln2_b_ = 0, fc1_w_ = 0, fc1_b_ = 0, fc2_w_ = 0, fc2_b_ = 0;
};

// logits = head(LN_f(x)); loss = mean cross-entropy over the microbatch's positions.
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
  const Tensor* logits(const BlockState& state) const override {
    return state.saved.slot_count() > kLogits ? &state.saved.at(kLogits) : nullptr;
  }

  Status init_parameters(std::uint64_t seed) override {
    params_.value(lnf_w_).fill(1.0f);
    params_.value(lnf_b_).fill(0.0f);
    fill_normal(params_.value(head_w_), kInitStd, seed, params_.name(head_w_));
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
    SPW_ASSIGN_OR_RETURN(Tensor * logits, s.get(kLogits, {n, shape_.vocab}));
    SPW_TRY(ops::layernorm_forward(*input, params_.value(lnf_w_), params_.value(lnf_b_),
                                   shape_.ln_eps, *ln, *mean, *rstd));
    SPW_TRY(ops::linear_forward(*ln, params_.value(head_w_), nullptr, *logits));
    float mean_loss = 0;
    SPW_TRY(ops::cross_entropy_forward(*logits, tokens_of(mb, mb.targets), mean_loss));
    if (loss) *loss = mean_loss;
    return Status::success();
  }

  Status backward_input(const MicrobatchData& mb, const Tensor* input, const Tensor*,
                        Tensor* dinput, BlockState& state) override {
    const std::int64_t n = mb.rows(), d = shape_.d_model;
    Stash& s = state.saved;
    SPW_ASSIGN_OR_RETURN(Tensor * dlogits, state.grads.get(kDlogits, {n, shape_.vocab}));
    SPW_ASSIGN_OR_RETURN(Tensor * dln, state.grads.get(kDln, {n, d}));
    SPW_TRY(ops::cross_entropy_backward(s.at(kLogits), tokens_of(mb, mb.targets), mb.grad_scale,
                                        *dlogits));
    SPW_TRY(ops::linear_backward_input(*dlogits, params_.value(head_w_), *dln));
    return ops::layernorm_backward_input(*dln, *input, params_.value(lnf_w_), s.at(kMean),
                                         s.at(kRstd), *dinput);
  }

  Status backward_weight(const MicrobatchData&, const Tensor* input, const Tensor*,
                         BlockState& state) override {
    Stash& s = state.saved;
    SPW_TRY(ops::linear_backward_weight(state.grads.at(kDlogits), s.at(kLn),
                                        params_.grad(head_w_), nullptr));
    return ops::layernorm_backward_weight(state.grads.at(kDln), *input, s.at(kMean),
                                          s.at(kRstd), params_.grad(lnf_w_),
                                          params_.grad(lnf_b_));
  }

 private:
  enum SavedSlot : std::size_t { kLn, kMean, kRstd, kLogits };
  enum GradSlot : std::size_t { kDlogits, kDln };

  GptShape shape_;
  std::string name_ = "head";
  ParameterStore params_;
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
