// The simulator's memory model: replays each rank's list against the timeline the simulator
// computed, doing with microbatch slots what the executor (runtime/pipeline_executor.cpp)
// does, and returns every rank's peak.
//
// A slot holds one microbatch of one local chunk. Its pieces, for stage s with input
// a(s-1) and output a(s) (activation_bytes; none for the last stage):
//   in       the chunk input, a(s-1)            RecvAct posts it, or F allocates it
//   mid      the rest of the stash              F (all of it arrives with RecvStash)
//   out      the chunk output, a(s)             F; SendAct reads it
//   out_grad the output's gradient, a(s)        RecvGrad posts it, or B allocates it
//   in_grad  the input's gradient, a(s-1)       B; SendGrad reads it
//   rest     the other gradient buffers         B (backward_bytes - in_grad)
// A forward-only chunk (PipeFB) has in, mid and out; a backward-only one all but out.
//
// When a slot is taken: at the first instruction that needs it, often a receive posted
// early. At step start the first `receive_lookahead` receives are posted, and reaching
// receive i posts every one up to i + receive_lookahead (RecvParams only when reached).
// When it is done: after its W and, if it sends a gradient to another rank, that send (a
// forward-only slot: after its SendStash). A done slot waits in a retiring list until its
// sends have completed; the executor tests the list (MPI_Testall per slot) whenever it
// takes a new slot and, when offloading, after every instruction but a receive or a reduce.
// Open MPI's MPI_Testall makes progress only after it has found a request unfinished, so a
// send counts as complete at a test only if, strictly between the moment its receiver took
// the data (reached the receive, or the data's arrival if it was already waiting) and the
// test, the sender made progress: an earlier test that found something unfinished, a wait
// blocked in MPI (a receive or the optimizer step's wait for its reduces), or a receive
// whose message was sent after that moment (data moves only while its receiver is inside
// MPI, so some progress between that send and the receive's end copied it).
//
// Pooled (no offload, or a chunk whose list offloads none of its stashes): a done slot's
// memory goes back to its chunk's pool, and a chunk makes a new slot, at full size, only
// when its pool is empty, so it holds its most slots ever. Otherwise (the list offloads
// some of the chunk's stashes) each piece is allocated when the executor allocates it; an
// Offload's stash (in and mid) is freed at the first test after its copy ended, a Prefetch
// (or a B or W that finds its stash out) allocates it again, a done slot frees all but out
// and in_grad (its sends may still read them) and the rest when its sends are seen
// complete. When offloading, finished slots are tested after every instruction but a
// receive or a reduce, pooled or not.
//
// A forward-only chunk frees its oldest waiting stash before a forward when more than
// kForwardStashesWaiting wait (the executor waits for them there), and its peak gets
// MemoryModel::forward_slot_margin whole slots more (up to kForwardStashesWaiting + 1 and
// one per microbatch): how many stashes it keeps depends on how far its backward rank runs
// behind, which the profile's timings give only to a few percent.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "partition/schedule.hpp"
#include "partition/simulator.hpp"

namespace spw::sched {

// What the simulator's timeline says about one rank, by position in its list.
struct RankReplay {
  std::vector<double> reached;  // the compute stream reaches the instruction
  std::vector<double> after;    // the compute stream moves on (a receive: its data is in)
  std::vector<double> begin;    // the timeline entry's span (an Offload: its copy)
  std::vector<double> end;
  std::vector<double> taken;  // a send: when its receiver took the data
  std::vector<std::pair<double, double>> waits;  // blocked inside MPI, in time order
  // Every receive in list order: (when its data was in, when its message was sent).
  std::vector<std::pair<double, double>> receives;
};

struct SlotMemory {
  std::vector<std::int64_t> peak_bytes;  // [rank]
  std::vector<int> max_slots;            // [rank]
};

// `costs` is checked and `ranks` has one entry per list of the validated `schedule`.
SlotMemory replay_slot_memory(const Schedule& schedule, const CostModel& costs,
                              const std::vector<RankReplay>& ranks);

}  // namespace spw::sched
