// Times a schedule with per-stage costs, without ranks: what the planner uses to compare
// schedules and partitions before any job runs, and what tests hold to the closed forms.
//
// Cost model, per rank (every rank of the schedule: with PipeFB the forward and the
// backward ranks alike):
//   compute stream  runs F, B, W and OptimizerStep one at a time in list order;
//   Send            starts a transfer when the compute stream reaches it and never blocks
//                   it; a directed link carries one transfer at a time, each taking
//                   latency + bytes / bandwidth. Bytes: the activation_bytes of the lower
//                   stage for activations and gradients, the stage's stash_bytes for a
//                   SendStash (forward rank -> backward rank), its parameter_bytes for a
//                   SendParams (backward rank -> forward rank);
//   Recv            blocks the compute stream until its transfer has arrived;
//   ReduceGrads     runs on a communication stream of its own (one reduce at a time), so
//                   it overlaps compute; OptimizerStep waits for all of the rank's reduces;
//   Offload/Prefetch run on an offload stream (one at a time); B and W of a prefetched
//                   stash wait for its prefetch to end.
// Memory per rank: the parameters of every stage it serves, plus gradients and optimizer
// state of the stages whose backwards it runs; plus live stashes: allocated when F starts
// (or when a RecvStash is reached), freed when W ends (or, on a forward-only rank, when
// its SendStash arrives), absent between the end of an Offload and the start of a
// Prefetch; plus transfer buffers for activations and gradients: a send holds its bytes
// from issue to arrival, a receive from the moment the Recv is reached until the F or B
// consuming it ends. Parameters move in place (no buffer). A free and an allocation at
// the same instant do not overlap.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/status.hpp"
#include "partition/schedule.hpp"

namespace spw::sched {

struct StageCost {
  double forward_s = 0;
  double backward_input_s = 0;
  double backward_weight_s = 0;
  double reduce_grads_s = 0;          // the data-parallel all-reduce of this stage's gradients
  double offload_s = 0;               // one stash to the capacity tier
  double prefetch_s = 0;              // one stash back
  std::int64_t activation_bytes = 0;  // the stage's output per microbatch; its gradient is as big
  std::int64_t stash_bytes = 0;       // kept per microbatch from F until W; what SendStash moves
  std::int64_t parameter_bytes = 0;   // what SendParams moves
  std::int64_t gradient_bytes = 0;
  std::int64_t optimizer_state_bytes = 0;
};

struct Link {
  double bandwidth_bytes_per_s = std::numeric_limits<double>::infinity();
  double latency_s = 0;
};

struct CostModel {
  std::vector<StageCost> stages;  // one per global stage, or a single entry for all stages
  Link link;                      // between any two ranks, unless `links` is given
  std::vector<Link> links;        // ranks*ranks, links[from * ranks + to]; empty: `link` everywhere
  double optimizer_step_s = 0;
};

enum class Stream : std::uint8_t { compute, link, collective, offload };
const char* stream_name(Stream stream);

struct TimelineEntry {
  Instruction instruction;
  double start_s = 0;
  double end_s = 0;
  // Recv is on the compute stream: the span is the time it blocked compute. Send is on the
  // link stream: the span is the transfer itself.
  Stream stream = Stream::compute;
};

struct Simulation {
  std::vector<std::vector<TimelineEntry>> timeline;  // [rank], in list order
  double iteration_s = 0;                            // the last end on any stream
  std::vector<double> busy_s;  // [rank] time running F, B, W and OptimizerStep
  // 1 - sum(busy) / (ranks * iteration) over every rank of the schedule (with PipeFB both
  // the forward and the backward ranks); 0 for a zero-length run.
  double bubble_fraction = 0;
  std::vector<std::int64_t> peak_memory_bytes;  // [rank]
  std::vector<int> max_live_stashes;            // [rank], from the validator
};

// Validates the schedule first (its error is returned unchanged), then checks the cost
// model: invalid_argument naming the value when a cost is negative or not finite, a
// bandwidth is not positive, or stages / links have the wrong length.
Result<Simulation> simulate(const Schedule& schedule, const CostModel& costs);

}  // namespace spw::sched
