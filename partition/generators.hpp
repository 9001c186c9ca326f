// Schedule generators: each one writes the instruction lists of one known pipeline schedule.
// A new schedule is a new generator (one .cpp each), never a flag inside the executor.
//
// Every generator emits the communication explicitly (RecvAct right before a Forward whose
// input lives on another rank, SendAct right after a Forward whose output does, RecvGrad /
// SendGrad likewise around BackwardInput), a ReduceGrads(chunk) right after the chunk's last
// BackwardWeight when data_parallel is set, and a final OptimizerStep on every rank that
// runs backwards (PipeFB adds the stash and parameter transfers between its two ranks per
// stage; its forward-only ranks end with RecvParams instead).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kernels/status.hpp"
#include "partition/schedule.hpp"

namespace spw::sched {

struct ScheduleShape {
  int ranks = 1;         // P, ranks in the pipeline (PipeFB: stages; it uses 2P ranks)
  int microbatches = 1;  // m, per iteration
  int chunks = 1;        // v, model chunks per rank (interleaved only; 1 otherwise)
  bool data_parallel = false;
};

// All forwards, then all backwards (Huang et al., GPipe). Needs v = 1. Stashes m per rank.
Result<Schedule> make_gpipe(const ScheduleShape& shape);

// PipeDream-Flush: P - rank - 1 warm-up forwards, then one forward one backward, then the
// remaining backwards. Needs v = 1. Stashes min(P - rank, m) on each rank.
Result<Schedule> make_1f1b(const ScheduleShape& shape);

// Megatron-LM's interleaved 1F1B over v >= 2 chunks per rank; needs m % P == 0.
Result<Schedule> make_interleaved_1f1b(const ScheduleShape& shape);

// ZB-H1 (Qi et al., Zero Bubble Pipeline Parallelism): backward split into B and W, rank r
// defers up to r W passes so every rank holds at most min(P, m) stashes, as 1F1B's first
// rank does, and the deferred W passes fill the cool-down. Needs v = 1.
Result<Schedule> make_zb_h1(const ScheduleShape& shape);

// PipeFB: stage s runs its forwards on rank s and its backwards on rank P + s (see
// schedule.hpp, Placement), so shape.ranks (P) counts stages and the schedule has 2P
// ranks. Forward ranks stream the m forwards and send each stash to their backward rank,
// which runs B and W in microbatch order, steps and sends the parameters back; only the
// backward ranks reduce and step. Needs v = 1. One stash per rank with free links.
Result<Schedule> make_pipefb(const ScheduleShape& shape);

// The forwards of `training` alone, for an evaluation pass (Schedule::forward_only): each
// rank's Forward, SendAct and RecvAct in their training order, each stash dropped (DropStash)
// once the forward's output is handed on; no backward, reduce, step or stash and parameter
// transfer, so PipeFB's backward ranks have empty lists. Offload instructions are left out:
// a dropped stash never needs the capacity tier. invalid_argument for a schedule that is
// already an evaluation.
Result<Schedule> make_evaluation(const Schedule& training);

// By name: "gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "pipefb"; not_found for another
// name.
Result<Schedule> make_schedule(std::string_view name, const ScheduleShape& shape);
std::vector<std::string> schedule_names();

}  // namespace spw::sched
