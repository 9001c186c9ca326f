// The single-rank trainer: the reference every parallel run must reproduce. One step runs
// the batch as `microbatches` microbatches (forward, then backward, block by block), adds
// their gradients and takes one optimizer step.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/status.hpp"
#include "runtime/batch_source.hpp"
#include "runtime/job_config.hpp"
#include "runtime/model.hpp"
#include "runtime/optimizer.hpp"

namespace spw {

struct TrainSettings {
  ModelSpec model;
  DataConfig data;
  std::int64_t batch = 16;
  std::int64_t microbatches = 1;
  std::int64_t steps = 0;   // 0: derived from epochs
  std::int64_t epochs = 0;
  OptimizerSettings optimizer;
  double clip_grad_norm = 0;  // > 0: the gradients' global norm is clipped to it each step
  std::uint64_t seed = 1234;
  std::string init_from;    // HDF5 checkpoint whose parameters start the run
  std::string resume_from;  // HDF5 checkpoint to continue exactly (parameters, optimizer, step)
  std::optional<std::size_t> memory_cap;
  // Planning only: memory_cap is not the job's memory.cap but each rank's share of its
  // node's memory budget, which the planner plans within where the job sets no cap.
  bool memory_cap_is_node_share = false;
  // What the planner may choose when it plans (parallel.stages = "auto"): the layout kind
  // (parallel.layout) and, with offload.tier = "auto", the offload; a fixed tier (file or
  // peer, with keep and lookahead) prices every plan, and the file tier's directory is where
  // its rate is measured. The trainer ignores both.
  Layout layout = Layout::automatic;
  OffloadConfig offload;
  // model.split_layers = "auto": the planner may cut gpt layers at its stage boundaries and
  // sets model.splits to the cuts it keeps. The trainer ignores it.
  bool split_layers_auto = false;
  // model.head_chunk_rows = "auto": the planner plans the gpt's head whole and chunked
  // (kAutoHeadChunkRows rows) and sets model.gpt.head_chunk_rows to its choice. The trainer
  // ignores it.
  bool head_chunk_auto = false;
  // The run evaluates (eval.every > 0): the held-out data opens with the trainer or the
  // executor, so a split that leaves too little text fails before the first step.
  bool evaluates = false;
  // Forwards only (spillway evaluate, spillway sample): the trainer holds parameters but no
  // gradients or optimizer state, a quarter of what AdamW training holds; run_step refuses.
  bool inference_only = false;
};

struct StepResult {
  std::int64_t step = 0;     // 1-based index of the step just taken
  double loss = 0;           // mean over the batch's positions
  double seconds = 0;
  double items_per_second = 0;  // tokens/s (gpt) or samples/s (mlp)
  double learning_rate = 0;     // the rate the step's update used
  // The global gradient norm before clipping, when the step clipped (train.clip_grad_norm)
  // and, in a pipeline, this rank took part in the exchange (it runs an OptimizerStep).
  std::optional<double> grad_norm;
};

class Trainer {
 public:
  static Result<std::unique_ptr<Trainer>> create(const TrainSettings& settings);

  // unsupported for an inference-only trainer.
  Status run_step(StepResult& result);
  std::int64_t steps_done() const { return step_; }
  std::int64_t total_steps() const { return total_steps_; }
  std::int64_t steps_per_epoch() const;
  const TrainSettings& settings() const { return settings_; }
  Model& model() { return *model_; }
  Optimizer& optimizer() { return *optimizer_; }  // not for an inference-only trainer
  // Accuracy of the model's argmax over the held-out set (Fashion-MNIST t10k).
  Result<double> test_accuracy();
  // The mean loss of `batches` batches of held-out data (open_evaluation_source), each of
  // train.batch samples run as the training batch's microbatches are, forwards only: the
  // loss a pipeline's PipelineExecutor::evaluate reproduces. Changes no parameter or state
  // that training reads; the first call opens the data.
  Result<double> evaluate(int batches);
  // The class scores of `mb` (a gpt's next-token logits, [samples * seq, vocab]) from a
  // forward pass, valid until the next call that runs the model; mb.targets may be any
  // valid class ids. unsupported for a model whose loss block keeps no scores.
  Result<const Tensor*> logits(const MicrobatchData& mb);
  Status save_checkpoint(const std::string& path, const std::string& config_json);
  // The data it trains and evaluates on (describe_data).
  std::string data_description() const;
  const char* item_name() const { return settings_.model.kind == "gpt" ? "tokens" : "samples"; }

 private:
  Trainer() = default;
  Status forward_backward(MicrobatchData mb, double& loss);
  // The forwards of every block into the activation stash; `outputs` gets each block's
  // output (nullptr for the loss block).
  Status forward(const MicrobatchData& mb, double& loss, std::vector<Tensor*>& outputs);

  TrainSettings settings_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<BatchSource> data_;
  std::unique_ptr<BatchSource> evaluation_data_;
  std::vector<BlockState> states_;
  Stash activations_{MemoryCategory::stash};
  Stash activation_grads_{MemoryCategory::workspace};
  MicrobatchBuffers buffers_;
  std::int64_t step_ = 0;
  std::int64_t total_steps_ = 0;
};

}  // namespace spw
