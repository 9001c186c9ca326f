// report.json: what a run did, for people and for scripts (benchmarks, CI checks).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/blas_kernels.hpp"
#include "kernels/memory_ledger.hpp"

namespace spw {

struct RunRecord {
  nlohmann::json config;
  std::string data;                  // what it read (describe_data)
  std::string item_name;             // "tokens" or "samples"
  std::vector<double> loss;          // one per step
  std::vector<double> step_seconds;  // one per step
  std::vector<double> learning_rate; // one per step
  std::vector<double> grad_norm;     // one per step, before clipping; empty without clipping
  std::vector<double> test_accuracy; // one per epoch, when the data has a test set
  struct Evaluation {
    std::int64_t step = 0;  // the evaluation ran after it
    double loss = 0;        // mean over the held-out batches
    double seconds = 0;     // how long it took (rank 0's, in a pipeline)
  };
  std::vector<Evaluation> evaluations;  // eval.every
  std::size_t parameters = 0;
  int threads = 1;
  int ranks = 1;
  double elapsed_seconds = 0;
  blas::KernelChoice blas;  // rank 0's
};

struct StepResult;
// Records an evaluation and says so in the log ("step 100: eval loss 2.9123 on 4 held-out
// batches, 0.21 s").
void record_evaluation(RunRecord& run, std::FILE* log, const RunRecord::Evaluation& evaluation,
                       int batches);

// Appends one step's loss, time, learning rate and (when it clipped) gradient norm.
void record_step(RunRecord& run, const StepResult& step);

// Median throughput over steps after the first (which pays for allocation and warm-up).
double median_items_per_second(const std::vector<double>& step_seconds, double items_per_step);

// What a job prints at its start about BLIS's kernels: a line when spillway or the user chose
// them, a warning when they are the slow generic ones; "" when BLIS chose well by itself.
std::string describe_kernel_choice(const blas::KernelChoice& choice);

nlohmann::json make_report(const RunRecord& run, double items_per_step,
                           const LedgerSnapshot& memory);

}  // namespace spw
