#include "runtime/gpt_layer_tail.hpp"

#include "kernels/ops/activation.hpp"
#include "kernels/ops/layernorm.hpp"
#include "kernels/ops/linear.hpp"
#include "kernels/ops/residual.hpp"
#include "runtime/gpt_blocks.hpp"

namespace spw {

Status GptLayerTail::create(ParameterStore& params, const std::string& prefix, std::int64_t d) {
  SPW_ASSIGN_OR_RETURN(proj_w_, params.add(prefix + "attn.proj.weight", {d, d}));
  SPW_ASSIGN_OR_RETURN(proj_b_, params.add(prefix + "attn.proj.bias", {d}));
  SPW_ASSIGN_OR_RETURN(ln2_w_, params.add(prefix + "ln2.weight", {d}));
  SPW_ASSIGN_OR_RETURN(ln2_b_, params.add(prefix + "ln2.bias", {d}));
  SPW_ASSIGN_OR_RETURN(fc1_w_, params.add(prefix + "mlp.fc1.weight", {4 * d, d}));
  SPW_ASSIGN_OR_RETURN(fc1_b_, params.add(prefix + "mlp.fc1.bias", {4 * d}));
  SPW_ASSIGN_OR_RETURN(fc2_w_, params.add(prefix + "mlp.fc2.weight", {d, 4 * d}));
  SPW_ASSIGN_OR_RETURN(fc2_b_, params.add(prefix + "mlp.fc2.bias", {d}));
  return Status::success();
}

void GptLayerTail::init_parameters(ParameterStore& params, std::uint64_t seed) const {
  for (std::size_t w : {proj_w_, fc1_w_, fc2_w_}) {
    fill_normal(params.value(w), kGptInitStd, seed, params.name(w));
  }
  for (std::size_t b : {proj_b_, ln2_b_, fc1_b_, fc2_b_}) params.value(b).fill(0.0f);
  params.value(ln2_w_).fill(1.0f);
}

Result<Tensor*> GptLayerTail::heads_output(Stash& saved, std::int64_t rows,
                                           std::int64_t d) const {
  return saved.get(saved_ + kAttn, {rows, d});
}

Status GptLayerTail::forward(ParameterStore& params, float ln_eps, Stash& s, const Tensor& x,
                             Tensor& y) const {
  const std::int64_t n = x.dim(0), d = x.dim(1);
  SPW_ASSIGN_OR_RETURN(Tensor * x2, s.get(saved_ + kX2, {n, d}));
  SPW_ASSIGN_OR_RETURN(Tensor * ln2, s.get(saved_ + kLn2, {n, d}));
  SPW_ASSIGN_OR_RETURN(Tensor * mean2, s.get(saved_ + kMean2, {n}));
  SPW_ASSIGN_OR_RETURN(Tensor * rstd2, s.get(saved_ + kRstd2, {n}));
  SPW_ASSIGN_OR_RETURN(Tensor * h, s.get(saved_ + kH, {n, 4 * d}));
  SPW_ASSIGN_OR_RETURN(Tensor * g, s.get(saved_ + kG, {n, 4 * d}));
  SPW_TRY(ops::linear_forward_residual(s.at(saved_ + kAttn), params.value(proj_w_),
                                       &params.value(proj_b_), x, *x2));
  SPW_TRY(ops::layernorm_forward(*x2, params.value(ln2_w_), params.value(ln2_b_), ln_eps, *ln2,
                                 *mean2, *rstd2));
  SPW_TRY(ops::linear_forward(*ln2, params.value(fc1_w_), &params.value(fc1_b_), *h));
  SPW_TRY(ops::gelu_forward(*h, *g));
  return ops::linear_forward_residual(*g, params.value(fc2_w_), &params.value(fc2_b_), *x2, y);
}

Status GptLayerTail::backward_input(ParameterStore& params, BlockState& state, Stash& scratch,
                                    const Tensor& dy) const {
  const std::int64_t n = dy.dim(0), d = dy.dim(1);
  Stash& s = state.saved;
  Stash& gs = state.grads;
  SPW_ASSIGN_OR_RETURN(Tensor * dh, gs.get(grads_ + kDh, {n, 4 * d}));
  SPW_ASSIGN_OR_RETURN(Tensor * dln2, gs.get(grads_ + kDln2, {n, d}));
  SPW_ASSIGN_OR_RETURN(Tensor * dx2, gs.get(grads_ + kDx2, {n, d}));
  SPW_ASSIGN_OR_RETURN(Tensor * dg, scratch.get(scratch_ + kWide, {n, 4 * d}));
  SPW_ASSIGN_OR_RETURN(Tensor * dnarrow, scratch.get(scratch_ + kNarrow, {n, d}));
  // MLP branch, then the residual joins: dx2 = dy + LN2'(fc1'(gelu'(fc2'(dy)))).
  SPW_TRY(ops::linear_backward_input(dy, params.value(fc2_w_), *dg));
  SPW_TRY(ops::gelu_backward(*dg, s.at(saved_ + kH), *dh));
  SPW_TRY(ops::linear_backward_input(*dh, params.value(fc1_w_), *dln2));
  SPW_TRY(ops::layernorm_backward_input(*dln2, s.at(saved_ + kX2), params.value(ln2_w_),
                                        s.at(saved_ + kMean2), s.at(saved_ + kRstd2),
                                        *dnarrow));
  SPW_TRY(ops::residual_forward(dy, *dnarrow, *dx2));
  return ops::linear_backward_input(*dx2, params.value(proj_w_), *dnarrow);
}

const Tensor& GptLayerTail::residual_gradient(const BlockState& state) const {
  return state.grads.at(grads_ + kDx2);
}

const Tensor& GptLayerTail::heads_gradient(const Stash& scratch) const {
  return scratch.at(scratch_ + kNarrow);
}

Status GptLayerTail::backward_weight(ParameterStore& params, BlockState& state,
                                     const Tensor& dy) const {
  Stash& s = state.saved;
  Stash& gs = state.grads;
  SPW_TRY(ops::linear_backward_weight(gs.at(grads_ + kDx2), s.at(saved_ + kAttn),
                                      params.grad(proj_w_), &params.grad(proj_b_)));
  SPW_TRY(ops::layernorm_backward_weight(gs.at(grads_ + kDln2), s.at(saved_ + kX2),
                                         s.at(saved_ + kMean2), s.at(saved_ + kRstd2),
                                         params.grad(ln2_w_), params.grad(ln2_b_)));
  SPW_TRY(ops::linear_backward_weight(gs.at(grads_ + kDh), s.at(saved_ + kLn2),
                                      params.grad(fc1_w_), &params.grad(fc1_b_)));
  return ops::linear_backward_weight(dy, s.at(saved_ + kG), params.grad(fc2_w_),
                                     &params.grad(fc2_b_));
}

}  // namespace spw
