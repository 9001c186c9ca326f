#include "runtime/profiler.hpp"

#include <algorithm>
#include <chrono>

#include "kernels/threading.hpp"
#include "runtime/parameter_store.hpp"

namespace spw {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// Runs `pass` warmup + repeats times and returns the median of the timed runs.
template <class Pass>
Result<double> time_pass(const ProfileOptions& options, Pass&& pass) {
  std::vector<double> times;
  for (int i = 0; i < options.warmup + options.repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    SPW_TRY(pass());
    if (i >= options.warmup) times.push_back(seconds_since(start));
  }
  return median(times);
}

double optimizer_state_per_parameter_byte(const OptimizerSettings& optimizer) {
  if (optimizer.kind == "adamw") return 2;
  return optimizer.momentum != 0 ? 1 : 0;
}

}  // namespace

Result<sched::ModelProfile> profile_model(const TrainSettings& settings,
                                          const ProfileOptions& options) {
  if (options.microbatch_samples < 1 || options.repeats < 1 || options.warmup < 0) {
    return error(StatusCode::invalid_argument,
                 "profiling needs microbatch_samples >= 1, repeats >= 1 and warmup >= 0");
  }
  const ModelSpec& spec = settings.model;
  SPW_ASSIGN_OR_RETURN(auto data, open_batch_source(settings.data, spec, settings.seed));
  MicrobatchBuffers buffers;
  SPW_TRY(data->fill(0, 0, options.microbatch_samples, options.microbatch_samples, buffers));
  MicrobatchData mb = buffers.view(options.microbatch_samples, spec.positions_per_sample());
  mb.grad_scale = static_cast<float>(1.0 / static_cast<double>(mb.rows()));

  sched::ModelProfile profile;
  profile.model = spec.describe();
  profile.microbatch_samples = options.microbatch_samples;
  profile.threads = compute_threads();
  const std::vector<std::string> names = spec.block_names();
  for (std::int64_t b = 0; b < spec.block_count(); ++b) {
    SPW_ASSIGN_OR_RETURN(auto model, Model::build(spec, b, b));
    SPW_TRY(model->init_parameters(settings.seed));
    Block& block = model->block(0);
    // Inputs and incoming gradients need realistic magnitudes, not their exact values.
    Tensor input;
    if (b > 0) {
      SPW_ASSIGN_OR_RETURN(input, Tensor::zeros(spec.activation_shape(b - 1, mb),
                                                MemoryCategory::workspace));
      fill_normal(input, 1.0, settings.seed, "profile.input");
    }
    const Shape out_shape = block.output_shape(mb);
    Tensor output, doutput, dinput;
    const bool hands_on = out_shape.rank() > 0;  // the loss block hands on nothing
    if (hands_on) {
      SPW_ASSIGN_OR_RETURN(output, Tensor::zeros(out_shape, MemoryCategory::workspace));
      SPW_ASSIGN_OR_RETURN(doutput, Tensor::zeros(out_shape, MemoryCategory::workspace));
      fill_normal(doutput, 1e-3, settings.seed, "profile.doutput");
    }
    if (b > 0) {
      SPW_ASSIGN_OR_RETURN(dinput, Tensor::zeros(input.shape(), MemoryCategory::workspace));
    }
    const Tensor* in = b > 0 ? &input : nullptr;
    Tensor* out = hands_on ? &output : nullptr;
    const Tensor* dout = hands_on ? &doutput : nullptr;
    Tensor* din = b > 0 ? &dinput : nullptr;
    BlockState state;
    double loss = 0;

    sched::BlockProfile p;
    p.name = names[static_cast<std::size_t>(b)];
    SPW_ASSIGN_OR_RETURN(p.forward_s, time_pass(options, [&] {
                           return block.forward(mb, in, out, state, &loss);
                         }));
    SPW_ASSIGN_OR_RETURN(p.backward_input_s, time_pass(options, [&] {
                           return block.backward_input(mb, in, dout, din, state);
                         }));
    SPW_ASSIGN_OR_RETURN(p.backward_weight_s, time_pass(options, [&] {
                           return block.backward_weight(mb, in, dout, state);
                         }));
    // What the executor keeps per microbatch for this block: its saved state, the
    // gradients its backward passes between calls, its output and that output's gradient.
    const std::int64_t output_bytes = hands_on ? out_shape.numel() * 4 : 0;
    p.stash_bytes = static_cast<std::int64_t>(state.saved.bytes() + state.grads.bytes()) +
                    2 * output_bytes;
    p.activation_bytes = output_bytes;
    for (const auto& param : model->parameters()) {
      p.parameter_bytes += static_cast<std::int64_t>(param.value->bytes());
    }
    p.gradient_bytes = p.parameter_bytes;
    p.optimizer_state_bytes = static_cast<std::int64_t>(
        optimizer_state_per_parameter_byte(settings.optimizer) *
        static_cast<double>(p.parameter_bytes));
    SPW_ASSIGN_OR_RETURN(auto optimizer, make_optimizer(settings.optimizer, model->parameters()));
    SPW_ASSIGN_OR_RETURN(double step_s, time_pass(options, [&] { return optimizer->step(); }));
    profile.optimizer_step_s += step_s;
    profile.blocks.push_back(p);
  }
  SPW_TRY(sched::check_profile(profile));
  return profile;
}

}  // namespace spw
