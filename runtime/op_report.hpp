// report.json's "time_by_op": what each kernel op took per step (kernels/op_timer.hpp), over
// the steps after the first (which pays for allocation and warm-up), beside the step itself,
// so a reader sees which ops a faster kernel would pay off in. The op times are measured
// around each step only: evaluation and checkpoints between steps do not count.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/op_timer.hpp"
#include "kernels/status.hpp"

namespace spw {

// Sums the op times of the steps it is given, skipping the first step of the run.
class StepOpTimes {
 public:
  // Call before each step.
  void start_step() { before_ = op_times(); }
  // Call after each step, with the step's wall time.
  void end_step(double step_seconds);

  std::int64_t steps() const { return counted_; }
  const OpTimes& total() const { return total_; }
  double step_seconds() const { return step_seconds_; }  // summed over the counted steps

 private:
  OpTimes before_, total_;
  std::int64_t seen_ = 0, counted_ = 0;
  double step_seconds_ = 0;
};

// {"steps", "step_seconds" (mean), "ops": [{"op", "seconds_per_step", "calls_per_step",
// "share_of_step"}, ...] (ops that ran, the longest first), "all_ops_share_of_step"}.
nlohmann::json time_by_op(const StepOpTimes& times);

// The `shown` ops that took longest as shares of a step, then the rest and what no op took:
// "linear_backward_weight 31%, ..., other ops 4%, outside ops 6%".
std::string describe_time_by_op(const nlohmann::json& time_by_op, int shown);

struct GatheredTimeByOp {
  std::vector<nlohmann::json> ranks;  // each rank's time_by_op, ordered by rank
  // All ranks together: seconds summed over the ranks (rank-seconds) against the ranks'
  // step seconds summed likewise, so "outside ops" holds the bubble and the waits too.
  nlohmann::json all_ranks;
};

// Every rank's time_by_op and their sum, on rank 0 of `comm`; empty on the others.
// Collective over comm.
Result<GatheredTimeByOp> gather_time_by_op(const StepOpTimes& times, MPI_Comm comm);

}  // namespace spw
