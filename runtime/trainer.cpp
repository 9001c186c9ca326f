#include "runtime/trainer.hpp"

#include <chrono>
#include <cmath>
#include <optional>

#include "kernels/memory_ledger.hpp"
#include "kernels/ops/cross_entropy.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/grad_clip.hpp"
#include "runtime/node_memory_budget.hpp"
#include "runtime/parameter_store.hpp"

namespace spw {

Result<std::unique_ptr<Trainer>> Trainer::create(const TrainSettings& settings) {
  if (settings.batch < 1 || settings.microbatches < 1 ||
      settings.batch % settings.microbatches != 0) {
    return error(StatusCode::invalid_argument,
                 "train.batch " + std::to_string(settings.batch) +
                     " must be a positive multiple of train.microbatches " +
                     std::to_string(settings.microbatches));
  }
  if (settings.memory_cap) SPW_TRY(MemoryLedger::process().set_cap(settings.memory_cap));

  auto trainer = std::unique_ptr<Trainer>(new Trainer());
  trainer->settings_ = settings;
  SPW_ASSIGN_OR_RETURN(DataSources sources, open_data_sources(settings.data, settings.model,
                                                               settings.seed, settings.evaluates));
  trainer->data_ = std::move(sources.training);
  trainer->evaluation_data_ = std::move(sources.evaluation);
  {
    std::optional<WithoutGradients> no_gradients;
    if (settings.inference_only) no_gradients.emplace();
    SPW_TRY(check_blocks_fit_node(
        block_memory(settings.model, 0, settings.model.block_count() - 1, !settings.inference_only,
                     settings.inference_only ? nullptr : &settings.optimizer),
        "the model"));
    SPW_ASSIGN_OR_RETURN(trainer->model_, Model::build(settings.model));
  }
  SPW_TRY(trainer->model_->init_parameters(settings.seed));
  trainer->total_steps_ = settings.steps > 0 ? settings.steps
                                             : settings.epochs * trainer->steps_per_epoch();
  if (trainer->total_steps_ < 1) {
    return error(StatusCode::invalid_argument,
                 "the job has no steps: set train.steps, or train.epochs with a data set "
                 "of at least one batch");
  }
  end_open_decay_at(trainer->settings_.optimizer.schedule, trainer->total_steps_);
  if (!settings.inference_only) {
    SPW_ASSIGN_OR_RETURN(trainer->optimizer_, make_optimizer(trainer->settings_.optimizer,
                                                             trainer->model_->parameters()));
  }
  trainer->states_.resize(trainer->model_->size());
  if (!settings.init_from.empty()) {
    SPW_TRY(load_parameters(settings.init_from, trainer->model_->parameters()));
  }
  if (!settings.resume_from.empty()) {
    CheckpointMeta meta;
    SPW_TRY(load_checkpoint(settings.resume_from, trainer->model_->parameters(),
                            trainer->optimizer_.get(), meta));
    trainer->step_ = meta.step;
  }
  return trainer;
}

std::int64_t Trainer::steps_per_epoch() const {
  return data_->samples_per_epoch() / settings_.batch;
}

Status Trainer::forward(const MicrobatchData& mb, double& loss, std::vector<Tensor*>& outputs) {
  const std::size_t blocks = model_->size();
  outputs.assign(blocks, nullptr);
  for (std::size_t b = 0; b + 1 < blocks; ++b) {
    SPW_ASSIGN_OR_RETURN(outputs[b], activations_.get(b, model_->block(b).output_shape(mb)));
  }
  for (std::size_t b = 0; b < blocks; ++b) {
    const Tensor* input = b == 0 ? nullptr : outputs[b - 1];
    SPW_TRY(model_->block(b).forward(mb, input, outputs[b], states_[b], &loss));
  }
  return Status::success();
}

Status Trainer::forward_backward(MicrobatchData mb, double& loss) {
  mb.backward_follows = true;
  const std::size_t blocks = model_->size();
  std::vector<Tensor*> outputs;
  std::vector<Tensor*> output_grads(blocks, nullptr);
  SPW_TRY(forward(mb, loss, outputs));
  for (std::size_t b = 0; b + 1 < blocks; ++b) {
    SPW_ASSIGN_OR_RETURN(output_grads[b],
                         activation_grads_.get(b, model_->block(b).output_shape(mb)));
  }
  for (std::size_t b = blocks; b-- > 0;) {
    Block& block = model_->block(b);
    const Tensor* input = b == 0 ? nullptr : outputs[b - 1];
    Tensor* dinput = b == 0 ? nullptr : output_grads[b - 1];
    SPW_TRY(block.backward_input(mb, input, output_grads[b], dinput, states_[b]));
    SPW_TRY(block.backward_weight(mb, input, output_grads[b], states_[b]));
  }
  return Status::success();
}

Status Trainer::run_step(StepResult& result) {
  if (!optimizer_) {
    return error(StatusCode::unsupported,
                 "this trainer was built for forwards only (inference_only): it cannot train");
  }
  const auto start = std::chrono::steady_clock::now();
  result.grad_norm.reset();
  const std::int64_t micro = settings_.batch / settings_.microbatches;
  const std::int64_t positions = settings_.model.positions_per_sample();
  model_->zero_grads();
  double step_loss = 0;
  for (std::int64_t k = 0; k < settings_.microbatches; ++k) {
    SPW_TRY(data_->fill(step_, k * micro, micro, settings_.batch, buffers_));
    MicrobatchData mb = buffers_.view(micro, positions);
    mb.grad_scale = static_cast<float>(1.0 / static_cast<double>(settings_.batch * positions));
    double loss = 0;
    SPW_TRY(forward_backward(mb, loss));
    step_loss += loss * static_cast<double>(micro) / static_cast<double>(settings_.batch);
  }
  if (settings_.clip_grad_norm > 0) {
    // The model's parameter order, as the pipeline adds its stages' sums.
    const std::vector<NamedParameter> parameters = model_->parameters();
    double sum = 0;
    for (const NamedParameter& p : parameters) sum += squared_norm(*p.grad);
    result.grad_norm = std::sqrt(sum);
    scale_gradients(parameters, clip_coefficient(*result.grad_norm, settings_.clip_grad_norm));
  }
  result.learning_rate = optimizer_->learning_rate();
  SPW_TRY(optimizer_->step());
  ++step_;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.step = step_;
  result.loss = step_loss;
  result.seconds = seconds;
  result.items_per_second = static_cast<double>(settings_.batch * positions) / seconds;
  return Status::success();
}

Result<double> Trainer::test_accuracy() {
  SPW_ASSIGN_OR_RETURN(auto test_set, data_->test_set());
  const std::int64_t rows = test_set->samples_per_epoch();
  const std::int64_t chunk = 500;
  std::int64_t correct = 0;
  MicrobatchBuffers buffers;
  for (std::int64_t first = 0; first < rows; first += chunk) {
    const std::int64_t count = std::min(chunk, rows - first);
    SPW_TRY(test_set->fill(0, first, count, rows, buffers));
    MicrobatchData mb = buffers.view(count, 1);
    mb.grad_scale = 1.0f;
    SPW_ASSIGN_OR_RETURN(const Tensor* scores, logits(mb));
    std::int64_t batch_correct = 0;
    SPW_TRY(ops::count_correct(*scores, {mb.targets, static_cast<std::size_t>(count)},
                               batch_correct));
    correct += batch_correct;
  }
  return static_cast<double>(correct) / static_cast<double>(rows);
}

std::string Trainer::data_description() const {
  return describe_data(*data_, evaluation_data_.get());
}

Result<double> Trainer::evaluate(int batches) {
  if (batches < 1) {
    return error(StatusCode::invalid_argument,
                 "an evaluation needs at least one batch, got " + std::to_string(batches));
  }
  if (!evaluation_data_) {
    SPW_ASSIGN_OR_RETURN(evaluation_data_, open_evaluation_source(settings_.data, settings_.model,
                                                                  settings_.seed));
  }
  const std::int64_t micro = settings_.batch / settings_.microbatches;
  const std::int64_t positions = settings_.model.positions_per_sample();
  MicrobatchBuffers buffers;
  std::vector<Tensor*> outputs;
  double sum = 0;
  for (int k = 0; k < batches; ++k) {
    for (std::int64_t j = 0; j < settings_.microbatches; ++j) {
      SPW_TRY(evaluation_data_->fill(k, j * micro, micro, settings_.batch, buffers));
      MicrobatchData mb = buffers.view(micro, positions);
      mb.grad_scale = static_cast<float>(1.0 / static_cast<double>(settings_.batch * positions));
      double loss = 0;
      SPW_TRY(forward(mb, loss, outputs));
      sum += loss * static_cast<double>(micro) / static_cast<double>(settings_.batch);
    }
  }
  return sum / batches;
}

Result<const Tensor*> Trainer::logits(const MicrobatchData& mb) {
  std::vector<Tensor*> outputs;
  double loss = 0;
  SPW_TRY(forward(mb, loss, outputs));
  const Tensor* scores = model_->block(model_->size() - 1).logits(states_.back());
  if (scores == nullptr && settings_.model.gpt.head_chunk_rows > 0) {
    return error(StatusCode::unsupported,
                 "this gpt's head is chunked (model.head_chunk_rows) and keeps no logits: build "
                 "the trainer with head_chunk_rows = 0 to read them");
  }
  if (scores == nullptr) {
    return error(StatusCode::unsupported, "this model does not produce class scores");
  }
  return scores;
}

Status Trainer::save_checkpoint(const std::string& path, const std::string& config_json) {
  CheckpointMeta meta;
  meta.step = step_;
  meta.data_position = step_ * settings_.batch;
  meta.config_json = config_json;
  return spw::save_checkpoint(path, model_->parameters(), optimizer_.get(), meta);
}

}  // namespace spw
