// Lower bounds on what the simulator will say, cheap enough to compute for every candidate
// the planner considers, so it simulates only candidates that could still win.
//
// A schedule's facts are what the bounds need from its lists, independent of costs: how
// many stashes each chunk holds at most, which chunk runs the rank's last BackwardInput and
// how many W passes may still follow it. From generated lists they are exact; for shapes too
// large to generate cheaply the planner estimates them from the generators' documented
// closed forms (and then claims no exactness).
//
// The time bound, per replica, is the largest of three chains no schedule can shorten
// (the simulator's times only grow with costs, and each chain is a sequence of dependent
// steps): for each rank r,
//   start_r + its compute + the reduce of its last-reduced chunk + the optimizer step,
//   start_r + its compute up to the gradient of its last B leaving + that gradient's way
//     down to stage 0 (B, and W where fused, plus transfers) + the optimizer step,
// where start_r is microbatch 0's forward reaching the rank; and one microbatch's forward
// through every stage and backward all the way down. With equal stages and free links the
// bound equals the simulator's time for every generator (the closed forms of README.md).
//
// Split stages (PipeFB: F_s on list s, B_s on list P + s) have chains of their own:
//   F_s: start_s + m * F_s + the last microbatch's way on, either up through the later
//        stages' forwards, the last stage's stash transfer and backward, or straight to B_s
//        by its stash, then down to stage 0's backward, its reduce, the step and the
//        parameters' way back to F_0;
//   B_s: the earliest its first backward can start (its stash from F_s, and the gradient of
//        microbatch 0 from B_{s+1}) + m * (B_s + W_s) + its reduce, the step and the
//        parameters' way back to F_s.
// With equal stages, F = B + W and free links this is the closed form (m + 2P - 1) F.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "partition/schedule.hpp"
#include "partition/simulator.hpp"

namespace spw::sched {

struct ScheduleFacts {
  int ranks = 1, chunks = 1, microbatches = 1;  // split: ranks counts stages (P), 2P lists
  bool split = false;         // every stage's forwards and backwards on two lists (PipeFB)
  bool fused = true;          // every B is followed at once by its W (no send between them)
  bool measured = true;       // from generated lists; false: estimated from closed forms
  std::vector<int> max_live;  // [rank * chunks + chunk], stashes alive at once (split: [list])
  std::vector<int> w_after;   // [rank * chunks + chunk], W passes after the last B's gradient left
  std::vector<int> last_b_chunk;  // [rank]
  std::vector<int> last_w_chunk;  // [rank]
};

ScheduleFacts schedule_facts(const Schedule& schedule);
ScheduleFacts estimated_facts(std::string_view schedule, int ranks, int chunks, int microbatches);

// act_links[s] carries stage s's output to stage s + 1 and grad_links[s] the gradient back
// (S - 1 entries each; with one pipeline rank both are free). For split stages,
// stash_links[s] carries stage s's stashes from F_s to B_s and param_links[s] its
// parameters back (S entries each; empty: free).
double iteration_lower_bound(const ScheduleFacts& facts, const std::vector<StageCost>& stages,
                             const std::vector<Link>& act_links,
                             const std::vector<Link>& grad_links, double optimizer_step_s,
                             const std::vector<Link>& stash_links = {},
                             const std::vector<Link>& param_links = {});

// Parameters, gradients, optimizer state and workspace of the rank's stages and its largest
// scratch, plus the largest stash total any single chunk reaches (or, if larger, one stash
// with the backward buffers of the B running on it): the simulator's peak is never below
// this. `offloadable`: stashes may be offloaded, and only the one a backward is running on
// must be resident, so one stash of the rank's largest chunk. `rank` is a list index.
std::int64_t memory_lower_bound(const ScheduleFacts& facts, const std::vector<StageCost>& stages,
                                int rank, bool offloadable = false);
// What the closed-form path reports as the peak, as the executor holds memory without
// offload (pooled slots, slot_memory.hpp): per chunk, its most stashes at once plus the
// receives posted ahead plus two slots whose sends are still being seen complete, at most
// m, each a whole slot (stash, backward buffers, output and its gradient; split stages: a
// forward list two slots plus those posted ahead); at least the bound.
std::int64_t memory_estimate(const ScheduleFacts& facts, const std::vector<StageCost>& stages,
                             int rank, int receive_lookahead);

}  // namespace spw::sched
