// Shared by the MPI pipeline tests: a tiny GPT, the single-rank reference run, and a pipeline
// run on the first P·R ranks of the world with its losses and weights gathered on rank 0.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "kernels/memory_ledger.hpp"
#include "op_test_support.hpp"
#include "runtime/pipeline_executor.hpp"
#include "runtime/train_command.hpp"
#include "runtime/trainer.hpp"

namespace spw {

inline constexpr int kSteps = 10;

inline int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

inline int world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// Eight blocks (embedding, six transformer blocks, head), so four ranks can hold two
// chunks each. SGD with momentum: its update is linear in the gradient, so the rounding
// differences of a differently ordered sum (replicas) stay rounding-sized; AdamW divides
// by sqrt(v) and blows up the noise on gradients that are zero in exact arithmetic.
inline TrainSettings tiny_gpt(int global_microbatches, const std::string& optimizer = "sgd") {
  TrainSettings s;
  s.model.kind = "gpt";
  s.model.gpt.layers = 6;
  s.model.gpt.d_model = 16;
  s.model.gpt.heads = 2;
  s.model.gpt.seq = 8;
  s.data.source = DataKind::synthetic;
  s.batch = 16;
  s.microbatches = global_microbatches;
  s.steps = kSteps;
  s.optimizer.kind = optimizer;
  s.optimizer.lr = optimizer == "sgd" ? 0.1 : 1e-2;
  s.optimizer.momentum = 0.9;
  s.optimizer.weight_decay = 0.01;
  s.seed = 7;
  return s;
}

struct Outcome {
  bool ok = false;
  std::string error;
  std::vector<double> loss;
  std::vector<double> learning_rate;  // as each step reported it
  std::vector<double> grad_norm;      // where the step reported one (clipping; rank 0's)
  std::vector<double> eval_loss;      // after steps kEvalAfter, with eval_batches > 0
  std::map<std::string, std::vector<float>> weights;  // rank 0 only
  std::map<std::string, std::vector<float>> replica1_weights;
  std::size_t peak_stash_bytes = 0;  // the largest over the run's ranks, on rank 0
  std::size_t peak_bytes = 0;        // the largest total over the run's ranks, on rank 0
  double bytes_evicted = 0;          // summed over the run's ranks, on rank 0
  std::size_t last_step_allocated_bytes = 0;  // the ledger's, the largest over ranks, on rank 0
  std::size_t slot_bytes = 0;  // the largest microbatch slot over the run's ranks, on rank 0
};

// With eval_batches > 0, runs evaluate(eval_batches) after these steps (0: before the first).
inline bool evaluates_after(int step) {
  return step == 0 || step == kSteps / 2 || step == kSteps;
}

inline Outcome reference(const TrainSettings& settings, int eval_batches = 0) {
  Outcome run;
  auto trainer = Trainer::create(settings);
  if (!trainer.ok()) {
    run.error = trainer.status().message();
    return run;
  }
  for (int i = 0; i < kSteps; ++i) {
    if (eval_batches > 0 && i == 0 && evaluates_after(0)) {
      auto loss = (*trainer)->evaluate(eval_batches);
      if (!loss.ok()) {
        run.error = loss.status().message();
        return run;
      }
      run.eval_loss.push_back(*loss);
    }
    StepResult step;
    const Status status = (*trainer)->run_step(step);
    if (!status.ok()) {
      run.error = status.message();
      return run;
    }
    run.loss.push_back(step.loss);
    run.learning_rate.push_back(step.learning_rate);
    if (step.grad_norm) run.grad_norm.push_back(*step.grad_norm);
    if (eval_batches > 0 && evaluates_after(i + 1)) {
      auto loss = (*trainer)->evaluate(eval_batches);
      if (!loss.ok()) {
        run.error = loss.status().message();
        return run;
      }
      run.eval_loss.push_back(*loss);
    }
  }
  for (const auto& p : (*trainer)->model().parameters()) {
    run.weights[p.name].assign(p.value->data(), p.value->data() + p.value->numel());
  }
  run.ok = true;
  return run;
}

// Ranks a run of `schedule` with P stages and R replicas needs ("pipefb": 2 per stage).
// An executor of `settings` with one stage a rank over the whole world (collective).
inline Result<std::unique_ptr<PipelineExecutor>> executor_over_world(
    const TrainSettings& settings) {
  ParallelConfig parallel;
  parallel.stages.form = StagesSpec::Form::count;
  parallel.stages.count = world_size();
  PipelineSettings pipeline_settings;
  pipeline_settings.train = settings;
  auto layout = make_pipeline_layout(parallel, settings.model.block_count(), settings.batch,
                                     settings.microbatches, world_size());
  if (!layout.ok()) return layout.status();
  pipeline_settings.layout = *layout;
  return PipelineExecutor::create(pipeline_settings, MPI_COMM_WORLD);
}

inline int ranks_needed(const std::string& schedule, int P, int R) {
  return P * R * (schedule == "pipefb" ? 2 : 1);
}

// `schedule` ("gpipe", "1f1b", "interleaved" with two chunks a rank, "zb-h1" or "pipefb")
// over P stage positions and R replicas, the stages split evenly.
inline ParallelConfig parallel_config(const std::string& schedule, int P, int R) {
  ParallelConfig parallel;
  parallel.stages.form = StagesSpec::Form::count;
  parallel.stages.count = P * (schedule == "interleaved" ? 2 : 1);
  parallel.chunks = schedule == "interleaved" ? 2 : 1;
  parallel.replicas = R;
  parallel.schedule = schedule == "gpipe"         ? ScheduleKind::gpipe
                      : schedule == "1f1b"        ? ScheduleKind::one_f_one_b
                      : schedule == "interleaved" ? ScheduleKind::interleaved
                                                  : ScheduleKind::zb_h1;
  if (schedule == "pipefb") {
    parallel.layout = Layout::pipefb;
    parallel.schedule = ScheduleKind::one_f_one_b;
  }
  return parallel;
}

// Collective over MPI_COMM_WORLD; ranks beyond ranks_needed() sit the run out. P counts
// stages (pipeline ranks, or forward/backward rank pairs for "pipefb").
inline Outcome pipeline(const TrainSettings& train, const std::string& schedule, int P, int R,
                        const OffloadConfig& offload = {}, int eval_batches = 0) {
  const int rank = world_rank();
  const int ranks = ranks_needed(schedule, P, R);
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, rank < ranks ? 0 : MPI_UNDEFINED, rank, &comm);
  Outcome run;
  if (comm != MPI_COMM_NULL) {
    const ParallelConfig parallel = parallel_config(schedule, P, R);
    PipelineSettings settings;
    settings.train = train;
    settings.offload = offload;
    MemoryLedger::process().reset_peaks();
    auto layout = make_pipeline_layout(parallel, train.model.block_count(), train.batch,
                                       train.microbatches, ranks);
    Status status = layout.status();
    double evicted = 0;
    unsigned long long allocated = 0, slot = 0;
    if (layout.ok()) {
      settings.layout = *layout;
      auto executor = PipelineExecutor::create(settings, comm);
      status = executor.status();
      if (status.ok() && eval_batches > 0 && evaluates_after(0)) {
        auto loss = (*executor)->evaluate(eval_batches);
        status = loss.status();
        if (loss.ok()) run.eval_loss.push_back(*loss);
      }
      for (int i = 0; status.ok() && i < kSteps; ++i) {
        StepResult step;
        status = (*executor)->run_step(step);
        run.loss.push_back(step.loss);
        run.learning_rate.push_back(step.learning_rate);
        if (step.grad_norm) run.grad_norm.push_back(*step.grad_norm);
        if (status.ok() && eval_batches > 0 && evaluates_after(i + 1)) {
          auto loss = (*executor)->evaluate(eval_batches);
          status = loss.status();
          if (loss.ok()) run.eval_loss.push_back(*loss);
        }
        if (!status.ok()) {
          // Peers are blocked on this rank: end the test run now rather than at a timeout.
          std::fprintf(stderr, "rank %d failed mid-run: %s\n", rank, status.message().c_str());
          MPI_Abort(MPI_COMM_WORLD, 2);
        }
      }
      if (status.ok()) {
        auto weights = (*executor)->gather_parameters(0);
        auto replica1 = R > 1 ? (*executor)->gather_parameters(1) : weights;
        status = weights.ok() ? replica1.status() : weights.status();
        if (status.ok()) {
          run.weights = std::move(weights).value();
          if (R > 1) run.replica1_weights = std::move(replica1).value();
        }
      }
      if (executor.ok()) {
        evicted = static_cast<double>((*executor)->offload_totals().engine.bytes_evicted);
        const auto& metrics = (*executor)->step_metrics();
        if (!metrics.empty())
          allocated = static_cast<unsigned long long>(metrics.back().allocated_bytes);
        for (std::size_t c = 0; c < (*executor)->local_chunks(); ++c) {
          slot = std::max<unsigned long long>(slot, (*executor)->stash_bytes(static_cast<int>(c)));
        }
      }
    }
    run.ok = status.ok();
    run.error = status.message();
    unsigned long long peak = MemoryLedger::process().snapshot().peak_of(MemoryCategory::stash);
    unsigned long long largest = 0;
    MPI_Reduce(&peak, &largest, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, 0, comm);
    run.peak_stash_bytes = largest;
    unsigned long long total = MemoryLedger::process().snapshot().peak_total;
    MPI_Reduce(&total, &largest, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, 0, comm);
    run.peak_bytes = largest;
    (void)MemoryLedger::process().set_cap(std::nullopt);  // the cap is the process's
    MPI_Reduce(&evicted, &run.bytes_evicted, 1, MPI_DOUBLE, MPI_SUM, 0, comm);
    MPI_Reduce(&allocated, &largest, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, 0, comm);
    run.last_step_allocated_bytes = largest;
    MPI_Reduce(&slot, &largest, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, 0, comm);
    run.slot_bytes = largest;
    MPI_Comm_free(&comm);
  }
  return run;
}

// A per-rank memory cap a quarter of the largest stash below `free_run`'s peak, which only
// offloading lets the run meet; the same on every rank (rank 0 holds the outcome).
inline std::size_t cap_that_needs_offload(const Outcome& free_run) {
  unsigned long long cap =
      world_rank() == 0 ? free_run.peak_bytes - free_run.peak_stash_bytes / 4 : 0;
  MPI_Bcast(&cap, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
  return static_cast<std::size_t>(cap);
}

using testing::max_relative;

// GoogleTest names for schedule parameters ("zb-h1" -> "zb_h1").
inline std::string schedule_test_name(const ::testing::TestParamInfo<std::string>& param) {
  std::string name = param.param;
  for (char& c : name) {
    if (c == '-') c = '_';
  }
  return name;
}

}  // namespace spw
