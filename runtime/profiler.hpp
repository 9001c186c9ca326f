// Measures a model's profile on this node, block by block, for the planner: each block's
// forward, input-gradient and weight-gradient time (median of `repeats` timed runs, spread
// over `sweeps` passes through the model, each after `warmup` runs) on one microbatch, and
// the bytes it keeps. Blocks are built, measured and freed one at a time, so a model far
// larger than the node's memory can still be profiled, and only the first block of each
// kind (ModelSpec::block_kind) is measured: the others take its figures, so a deep model
// costs no more to profile than a shallow one. Each timed pass starts with the
// block's parameters, gradients and saved state evicted from the caches, as a training step
// leaves them (profiler.cpp, measure_block).
//
// The bytes come from the memory ledger, as the executor's allocations do: the state a
// block keeps after its forward and after its backward-input (BlockState), what it still
// holds once that state is gone and its parameters are not counted (its own reusable
// buffers), and the most any pass allocated above what it left behind plus what kernels
// keep for the whole process (scratch). Measuring resets the ledger's high-water mark, and
// leaves it reset: peaks reported after profiling are the run's own.
#pragma once

#include "kernels/status.hpp"
#include "partition/profile.hpp"
#include "runtime/trainer.hpp"

namespace spw {

struct ProfileOptions {
  std::int64_t microbatch_samples = 1;
  int warmup = 1;   // untimed runs per pass each time a block is built
  // Timed runs per pass (the median counts); a block that stands for n blocks of its kind
  // gets min(n, 4) times as many.
  int repeats = 5;
  // The timed runs are spread over this many sweeps through all blocks (at most repeats),
  // so a change of load while profiling reaches every block alike.
  int sweeps = 3;
};

// Uses settings.model, .data (real inputs for the first and last block), .optimizer (to
// size and time its state) and .seed. Runs with the calling thread's compute threads.
Result<sched::ModelProfile> profile_model(const TrainSettings& settings,
                                          const ProfileOptions& options);

}  // namespace spw
