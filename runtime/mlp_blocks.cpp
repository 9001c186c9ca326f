#include "runtime/mlp_blocks.hpp"

#include <cmath>
#include <span>

#include "kernels/ops/activation.hpp"
#include "kernels/ops/cross_entropy.hpp"
#include "kernels/ops/linear.hpp"
#include "runtime/parameter_store.hpp"

namespace spw {

namespace {

class MlpLayer final : public Block {
 public:
  MlpLayer(std::int64_t in, std::int64_t out, std::size_t index, bool last)
      : in_(in), out_(out), last_(last), first_(index == 0),
        name_("layers." + std::to_string(index)) {}

  Status create() {
    SPW_ASSIGN_OR_RETURN(w_, params_.add(name_ + ".weight", {out_, in_}));
    SPW_ASSIGN_OR_RETURN(b_, params_.add(name_ + ".bias", {out_}));
    return Status::success();
  }

  const std::string& name() const override { return name_; }
  std::vector<NamedParameter> parameters() override { return params_.named(); }
  Shape output_shape(const MicrobatchData& mb) const override {
    return last_ ? Shape{} : Shape{mb.samples, out_};
  }
  bool reads_data() const override { return first_; }
  bool computes_loss() const override { return last_; }
  const Tensor* logits(const BlockState& state) const override {
    return last_ && state.saved.slot_count() > kPreActivation ? &state.saved.at(kPreActivation)
                                                              : nullptr;
  }

  // torch.nn.Linear's default: U(-1/sqrt(in), 1/sqrt(in)) for weight and bias.
  Status init_parameters(std::uint64_t seed) override {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_));
    for (std::size_t i = 0; i < params_.size(); ++i) {
      fill_uniform(params_.value(i), bound, seed, params_.name(i));
    }
    return Status::success();
  }

  Status forward(const MicrobatchData& mb, const Tensor* input, Tensor* output,
                 BlockState& state, double* loss) override {
    const Tensor x = layer_input(mb, input);
    SPW_ASSIGN_OR_RETURN(Tensor * z, state.saved.get(kPreActivation, {mb.samples, out_}));
    SPW_TRY(ops::linear_forward(x, params_.value(w_), &params_.value(b_), *z));
    if (!last_) return ops::relu_forward(*z, *output);
    if (mb.targets == nullptr) {
      return error(StatusCode::invalid_argument, name_ + ": the microbatch's labels are missing");
    }
    float mean_loss = 0;
    SPW_TRY(ops::cross_entropy_forward(*z, labels(mb), mean_loss));
    if (loss) *loss = mean_loss;
    return Status::success();
  }

  Status backward_input(const MicrobatchData& mb, const Tensor*, const Tensor* doutput,
                        Tensor* dinput, BlockState& state) override {
    SPW_ASSIGN_OR_RETURN(Tensor * dz, state.grads.get(kDz, {mb.samples, out_}));
    if (last_) {
      SPW_TRY(ops::cross_entropy_backward(state.saved.at(kPreActivation), labels(mb),
                                          mb.grad_scale, *dz));
    } else {
      SPW_TRY(ops::relu_backward(*doutput, state.saved.at(kPreActivation), *dz));
    }
    if (first_) return Status::success();  // features have no gradient
    return ops::linear_backward_input(*dz, params_.value(w_), *dinput);
  }

  Status backward_weight(const MicrobatchData& mb, const Tensor* input, const Tensor*,
                         BlockState& state) override {
    return ops::linear_backward_weight(state.grads.at(kDz), layer_input(mb, input),
                                       params_.grad(w_), &params_.grad(b_));
  }

 private:
  Tensor layer_input(const MicrobatchData& mb, const Tensor* input) const {
    if (!first_) return *input;
    return Tensor::borrow(const_cast<float*>(mb.features), {mb.samples, in_});
  }
  static std::span<const std::int32_t> labels(const MicrobatchData& mb) {
    return {mb.targets, static_cast<std::size_t>(mb.samples)};
  }

  enum SavedSlot : std::size_t { kPreActivation };
  enum GradSlot : std::size_t { kDz };

  std::int64_t in_, out_;
  bool last_, first_;
  std::string name_;
  ParameterStore params_;
  std::size_t w_ = 0, b_ = 0;
};

}  // namespace

Result<std::unique_ptr<Block>> make_mlp_layer(const std::vector<std::int64_t>& dims,
                                              std::size_t index) {
  if (dims.size() < 2 || index + 1 >= dims.size()) {
    return error(StatusCode::invalid_argument,
                 "mlp layer " + std::to_string(index) + " does not exist for " +
                     std::to_string(dims.size()) + " widths");
  }
  auto layer = std::make_unique<MlpLayer>(dims[index], dims[index + 1], index,
                                          index + 2 == dims.size());
  SPW_TRY(layer->create());
  return std::unique_ptr<Block>(std::move(layer));
}

}  // namespace spw
