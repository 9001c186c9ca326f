#include "runtime/optimizer.hpp"

#include <cmath>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "kernels/op_timer.hpp"

namespace spw {
namespace {

// The arithmetic runs in float on float scalars, in the order torch's kernels use, so the
// only difference from torch.optim is the rounding of its own vectorised kernels.
class Sgd final : public Optimizer {
 public:
  Sgd(OptimizerSettings settings, std::vector<NamedParameter> parameters)
      : Optimizer(settings, std::move(parameters),
                  settings.momentum > 0.0 ? std::vector<std::string>{"momentum_buffer"}
                                          : std::vector<std::string>{}) {}

  Status step() override {
    const OpTimer timer(KernelOp::optimizer_step);
    const float lr = static_cast<float>(learning_rate());
    const float mu = static_cast<float>(settings_.momentum);
    const bool with_momentum = !state_names_.empty();
    // torch starts the buffer as a copy of the first gradient rather than from zero.
    const bool first = step_ == 0;
    // One team for all tensors: a parallel region per bias would cost more than its update.
#pragma omp parallel
    for (std::size_t i = 0; i < parameters_.size(); ++i) {
      float* p = parameters_[i].value->data();
      const float* g = parameters_[i].grad->data();
      float* b = with_momentum ? state_[i][0].data() : nullptr;
      const std::int64_t n = parameters_[i].value->numel();
      const bool decay = decays(i) && settings_.weight_decay != 0.0;
      const float wd = static_cast<float>(settings_.weight_decay);
      if (with_momentum) {
#pragma omp for simd schedule(static) nowait
        for (std::int64_t j = 0; j < n; ++j) {
          const float d = decay ? g[j] + wd * p[j] : g[j];
          const float buffer = first ? d : b[j] * mu + d;
          b[j] = buffer;
          p[j] = p[j] - lr * buffer;
        }
      } else {
#pragma omp for simd schedule(static) nowait
        for (std::int64_t j = 0; j < n; ++j) {
          const float d = decay ? g[j] + wd * p[j] : g[j];
          p[j] = p[j] - lr * d;
        }
      }
    }
    ++step_;
    return Status::success();
  }
};

class AdamW final : public Optimizer {
 public:
  AdamW(OptimizerSettings settings, std::vector<NamedParameter> parameters)
      : Optimizer(settings, std::move(parameters), {"exp_avg", "exp_avg_sq"}) {}

  Status step() override {
    const OpTimer timer(KernelOp::optimizer_step);
    const double t = static_cast<double>(step_ + 1);
    const double lr = learning_rate();
    // Bias corrections in double, as torch computes them on the host in Python floats.
    const double correction1 = 1.0 - std::pow(settings_.beta1, t);
    const double correction2 = 1.0 - std::pow(settings_.beta2, t);
    const float step_size = static_cast<float>(lr / correction1);
    const float correction2_sqrt = static_cast<float>(std::sqrt(correction2));
    const float shrink = static_cast<float>(1.0 - lr * settings_.weight_decay);
    const float b1 = static_cast<float>(settings_.beta1);
    const float one_minus_b1 = static_cast<float>(1.0 - settings_.beta1);
    const float b2 = static_cast<float>(settings_.beta2);
    const float one_minus_b2 = static_cast<float>(1.0 - settings_.beta2);
    const float eps = static_cast<float>(settings_.eps);
#pragma omp parallel
    for (std::size_t i = 0; i < parameters_.size(); ++i) {
      float* p = parameters_[i].value->data();
      const float* g = parameters_[i].grad->data();
      float* m = state_[i][0].data();
      float* v = state_[i][1].data();
      const std::int64_t n = parameters_[i].value->numel();
      const bool decay = decays(i) && settings_.weight_decay != 0.0;
#pragma omp for simd schedule(static) nowait
      for (std::int64_t j = 0; j < n; ++j) {
        const float param = decay ? p[j] * shrink : p[j];
        const float mean = m[j] * b1 + one_minus_b1 * g[j];
        const float square = v[j] * b2 + one_minus_b2 * (g[j] * g[j]);
        m[j] = mean;
        v[j] = square;
        const float denom = std::sqrt(square) / correction2_sqrt + eps;
        p[j] = param - step_size * (mean / denom);
      }
    }
    ++step_;
    return Status::success();
  }
};

bool in_unit_interval(double x) { return x >= 0.0 && x < 1.0; }

Status validate_settings(const OptimizerSettings& s) {
  if (s.kind != "sgd" && s.kind != "adamw") {
    return error(StatusCode::invalid_argument,
                 "optimizer kind '" + s.kind + "' is not one of: sgd, adamw");
  }
  // Written so that NaN fails every check.
  if (!(s.lr >= 0.0) || !std::isfinite(s.lr)) {
    return error(StatusCode::invalid_argument,
                 "optimizer lr must be finite and >= 0, got " + std::to_string(s.lr));
  }
  if (!(s.weight_decay >= 0.0) || !std::isfinite(s.weight_decay)) {
    return error(
        StatusCode::invalid_argument,
        "optimizer weight_decay must be finite and >= 0, got " + std::to_string(s.weight_decay));
  }
  SPW_TRY(validate_schedule(s.lr, s.schedule));
  if (s.kind == "sgd" && !in_unit_interval(s.momentum)) {
    return error(StatusCode::invalid_argument,
                 "sgd momentum must be in [0, 1), got " + std::to_string(s.momentum));
  }
  if (s.kind == "adamw") {
    if (!in_unit_interval(s.beta1) || !in_unit_interval(s.beta2)) {
      return error(StatusCode::invalid_argument, "adamw betas must be in [0, 1), got (" +
                                                     std::to_string(s.beta1) + ", " +
                                                     std::to_string(s.beta2) + ")");
    }
    if (!(s.eps > 0.0) || !std::isfinite(s.eps)) {
      return error(StatusCode::invalid_argument,
                   "adamw eps must be finite and > 0, got " + std::to_string(s.eps));
    }
  }
  return Status::success();
}

Status validate_parameters(const std::vector<NamedParameter>& parameters) {
  std::unordered_set<std::string> names;
  std::unordered_map<const float*, std::string> owner;  // tied weights must come once
  for (const NamedParameter& p : parameters) {
    if (p.name.empty()) {
      return error(StatusCode::invalid_argument, "an optimizer parameter has an empty name");
    }
    if (!names.insert(p.name).second) {
      return error(StatusCode::invalid_argument,
                   "optimizer parameter '" + p.name + "' is listed twice");
    }
    if (p.value == nullptr || p.grad == nullptr) {
      return error(StatusCode::invalid_argument,
                   "optimizer parameter '" + p.name + "' needs both a value and a gradient");
    }
    if (!(p.grad->shape() == p.value->shape())) {
      return error(StatusCode::shape_mismatch, "optimizer parameter '" + p.name + "' has shape " +
                                                   p.value->shape().to_string() +
                                                   " but its gradient has shape " +
                                                   p.grad->shape().to_string());
    }
    if (p.value->numel() == 0) continue;  // empty tensors share no memory
    auto [it, fresh] = owner.emplace(p.value->data(), p.name);
    if (!fresh) {
      return error(StatusCode::invalid_argument,
                   "optimizer parameters '" + it->second + "' and '" + p.name +
                       "' are the same tensor: pass a tied weight once");
    }
  }
  return Status::success();
}

}  // namespace

Optimizer::Optimizer(OptimizerSettings settings, std::vector<NamedParameter> parameters,
                     std::vector<std::string> state_names)
    : settings_(std::move(settings)),
      parameters_(std::move(parameters)),
      state_names_(std::move(state_names)) {}

Status Optimizer::allocate_state() {
  state_.assign(parameters_.size(), {});
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    const Tensor& value = *parameters_[i].value;
    MemoryPlacement placement;
    if (value.allocation() != nullptr && value.allocation()->bound_node() >= 0) {
      placement = MemoryPlacement::on_node(value.allocation()->bound_node());
    }
    for (std::size_t slot = 0; slot < state_names_.size(); ++slot) {
      auto tensor = Tensor::zeros(value.shape(), MemoryCategory::optimizer_state, placement);
      if (!tensor.ok()) {
        return tensor.status().with_context("allocating " + state_names_[slot] + " of '" +
                                            parameters_[i].name + "'");
      }
      state_[i].push_back(std::move(tensor).value());
    }
  }
  return Status::success();
}

void Optimizer::zero_grad() {
#pragma omp parallel
  for (const NamedParameter& p : parameters_) {
    float* g = p.grad->data();
    const std::int64_t n = p.grad->numel();
#pragma omp for simd schedule(static) nowait
    for (std::int64_t j = 0; j < n; ++j) g[j] = 0.0f;
  }
}

Status Optimizer::set_step(std::int64_t step) {
  if (step < 0) {
    return error(StatusCode::invalid_argument,
                 "optimizer step must be >= 0, got " + std::to_string(step));
  }
  step_ = step;
  return Status::success();
}

Result<std::unique_ptr<Optimizer>> make_optimizer(const OptimizerSettings& settings,
                                                  std::vector<NamedParameter> parameters) {
  SPW_TRY(validate_settings(settings));
  SPW_TRY(validate_parameters(parameters));
  std::unique_ptr<Optimizer> optimizer;
  if (settings.kind == "sgd") {
    optimizer = std::make_unique<Sgd>(settings, std::move(parameters));
  } else {
    optimizer = std::make_unique<AdamW>(settings, std::move(parameters));
  }
  SPW_TRY(optimizer->allocate_state());
  return optimizer;
}

}  // namespace spw
