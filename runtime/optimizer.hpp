// Optimizers: SGD with momentum and AdamW, with the update rules of torch.optim so that a run
// can be compared step by step with its PyTorch reference (bench/pytorch).
//
// Weight decay goes to tensors of rank >= 2 only (matrix weights, embeddings); biases and
// LayerNorm gains get none. That is the two-param-group split GPT training scripts pass to
// torch.optim, and it is applied the same way by both optimizers.
//
// State (momentum, moments) is allocated when the optimizer is made, under
// MemoryCategory::optimizer_state and on the NUMA node of its parameter, so the ledger shows
// the full optimizer footprint before the first step instead of in the middle of it.
// Updates are element-wise, so every element sees the same arithmetic whatever the thread
// count: results are bit-identical run to run.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/status.hpp"
#include "kernels/tensor.hpp"
#include "runtime/lr_schedule.hpp"
#include "runtime/parameters.hpp"

namespace spw {

struct OptimizerSettings {
  std::string kind = "adamw";  // "sgd" or "adamw"
  double lr = 1e-3;
  double momentum = 0.0;  // sgd; 0 keeps no momentum buffer, like torch
  double beta1 = 0.9;     // adamw
  double beta2 = 0.999;   // adamw
  double eps = 1e-8;      // adamw
  double weight_decay = 0.0;
  LrSchedule schedule;  // lr is its peak; constant by default
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Updates every parameter from its gradient and counts one step.
  virtual Status step() = 0;
  // Zeroes every gradient, for the next accumulation.
  void zero_grad();

  // Updates done so far; AdamW's bias correction uses it.
  std::int64_t step_count() const { return step_; }
  // For a resumed run: the count saved with the state. invalid_argument if negative.
  Status set_step(std::int64_t step);

  // The learning rate the next step() uses: settings().schedule applied to the base rate.
  double learning_rate() const { return scheduled_lr(settings_.lr, settings_.schedule, step_ + 1); }
  // Sets the base rate (the schedule's peak), for a driver that moves it itself.
  void set_learning_rate(double lr) { settings_.lr = lr; }

  const OptimizerSettings& settings() const { return settings_; }
  const std::vector<NamedParameter>& parameters() const { return parameters_; }

  // Checkpoint access. Each parameter has one state tensor per name, shaped like the
  // parameter: {"momentum_buffer"} for SGD with momentum, {} without, {"exp_avg",
  // "exp_avg_sq"} for AdamW (torch's state_dict names).
  const std::vector<std::string>& state_names() const { return state_names_; }
  Tensor& state(std::size_t parameter, std::size_t slot) { return state_[parameter][slot]; }
  const Tensor& state(std::size_t parameter, std::size_t slot) const {
    return state_[parameter][slot];
  }

 protected:
  Optimizer(OptimizerSettings settings, std::vector<NamedParameter> parameters,
            std::vector<std::string> state_names);
  // Allocates the zeroed state tensors; called once by make_optimizer.
  Status allocate_state();
  // Whether weight decay applies to this parameter (rank >= 2).
  bool decays(std::size_t parameter) const { return parameters_[parameter].value->rank() >= 2; }

  OptimizerSettings settings_;
  std::vector<NamedParameter> parameters_;
  std::vector<std::string> state_names_;
  std::vector<std::vector<Tensor>> state_;  // [parameter][slot]
  std::int64_t step_ = 0;

  friend Result<std::unique_ptr<Optimizer>> make_optimizer(const OptimizerSettings&,
                                                           std::vector<NamedParameter>);
};

// Validates the settings (known kind, lr >= 0, momentum and betas in [0, 1), eps > 0,
// weight_decay >= 0, the schedule as validate_schedule checks it) and the parameters
// (non-empty unique names, value and grad set, grad shaped like value, no tensor passed
// twice), then allocates the state.
Result<std::unique_ptr<Optimizer>> make_optimizer(const OptimizerSettings& settings,
                                                  std::vector<NamedParameter> parameters);

}  // namespace spw
