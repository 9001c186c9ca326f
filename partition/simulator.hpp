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
//                   stash wait for its prefetch to end. With copies_take_compute they
//                   also hold the compute stream while they run.
// Memory per rank follows the executor (runtime/pipeline_executor.hpp) and is replayed after
// the timeline by slot_memory.hpp: the parameters of every stage the rank serves, plus the
// gradients, optimizer state and workspace of the stages whose backwards it runs, plus the
// largest scratch of any of its stages, plus one slot per microbatch in flight on each
// local chunk. A slot is taken when a receive for its microbatch is posted (MemoryModel::
// receive_lookahead receives ahead) or by its F, and is given back once its W (or, on a
// forward-only rank, its SendStash) is done and the executor has seen its sends complete.
// Slots keep their memory for the next microbatch, except, when offloading (MemoryModel::
// offloading), those of a chunk whose list offloads some of its stashes: their pieces come
// and go: receive buffers when posted, the stash and output at F, the gradient buffers at B,
// the stash out between Offload and Prefetch.
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
  // Per microbatch. The stage's input is the previous stage's activation_bytes.
  std::int64_t activation_bytes = 0;  // the stage's output; its gradient is as big
  // What F keeps for B and W: the stage's input, every block output but the stage's own,
  // and the blocks' saved state. What SendStash moves and an Offload takes out.
  std::int64_t stash_bytes = 0;
  std::int64_t parameter_bytes = 0;  // what SendParams moves
  std::int64_t gradient_bytes = 0;
  std::int64_t optimizer_state_bytes = 0;
  // What B allocates and keeps until W: the input's gradient (as big as the input), the
  // gradients of the block outputs inside the stage, and what blocks keep from B for W.
  std::int64_t backward_bytes = 0;
  // Per rank: held for the whole run where the stage's backwards run (blocks' own reusable
  // buffers), and the most one pass allocates and frees again (the rank adds its largest).
  std::int64_t workspace_bytes = 0;
  std::int64_t scratch_bytes = 0;
};

struct Link {
  double bandwidth_bytes_per_s = std::numeric_limits<double>::infinity();
  double latency_s = 0;
};

// How the executor holds a microbatch's memory (slot_memory.hpp has the details).
struct MemoryModel {
  // Receives are posted this many receive instructions ahead of the one being waited for
  // (the executor's PipelineSettings::receive_lookahead), each taking its microbatch's slot;
  // 0: posted when reached.
  int receive_lookahead = 4;
  // The executor runs an offload engine. Without one, slots keep their memory between
  // microbatches, so a chunk holds its most slots ever at full size. With one, the slots of
  // a chunk whose list offloads some of its stashes have their pieces freed as they finish,
  // those of a chunk it never offloads are still pooled, and finished slots are tested after
  // every instruction (the executor's progress()).
  bool offloading = false;
  // Slots added to each forward-only chunk (PipeFB), up to one per microbatch. Such a chunk
  // keeps each stash until its backward rank, running behind, takes it, so its slot count
  // follows the two ranks' paces: a backward rank a few percent slower than profiled keeps
  // one more waiting (gpt-m, one stage: 6 slots against 5 replayed).
  int forward_slot_margin = 1;
};

// A forward-only chunk (PipeFB) keeps at most this many stashes waiting for its backward
// rank to take them while it computes the next (so it holds at most one slot more): before
// a forward the executor waits for the oldest beyond it, and the memory replay frees it
// there. Without the bound the forward rank's memory would follow how far
// its backward rank runs behind, by up to a stash per microbatch, and no cap could be
// planned for it. The timeline does not model the wait: the forward rank, with a third of
// the stage's work, is rarely the one that waits.
inline constexpr int kForwardStashesWaiting = 2;

struct CostModel {
  std::vector<StageCost> stages;  // one per global stage, or a single entry for all stages
  Link link;                      // between any two ranks, unless `links` is given
  std::vector<Link> links;        // ranks*ranks, links[from * ranks + to]; empty: `link` everywhere
  double optimizer_step_s = 0;
  MemoryModel memory;
  // Every rank's offload engine shares a core with its compute threads (no core is spare),
  // so a copy takes turns with compute instead of overlapping it: an Offload or Prefetch
  // then holds the compute stream for its duration. Measured on the 2-core VM (quickstart
  // job, 2 ranks x 1 thread, file tier): compute spans grew by about the copies' time.
  bool copies_take_compute = false;
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
  // [rank] slots the rank holds at its peak, over all its chunks: with pooled slots, the
  // most it ever made; otherwise the most in use at once.
  std::vector<int> max_slots;
};

// Validates the schedule first (its error is returned unchanged), then checks the cost
// model: invalid_argument naming the value when a cost is negative or not finite, a
// bandwidth is not positive, stages / links have the wrong length, or the receive
// lookahead or forward slot margin is negative.
Result<Simulation> simulate(const Schedule& schedule, const CostModel& costs);

}  // namespace spw::sched
