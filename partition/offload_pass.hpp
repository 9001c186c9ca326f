// The offload pass: rewrites a schedule so that stashes a rank will not need for a while go to
// the capacity tier after their forward and come back shortly before their backward. It
// inserts Offload and Prefetch instructions and, where stashes travel between ranks (PipeFB),
// moves each RecvStash up to where the stash arrives; the order of everything else is
// unchanged, so the pass composes with every generator.
//
// Receiving on arrival: a generator places RecvStash right before the stash's backward, the
// last moment it is needed, where an Offload after it would only evict what B reads next.
// The pass moves each RecvStash up to the first point where, on a timeline with unit costs
// (F = B = W = 1, free links), its stash has arrived: the forward rank runs a third of the
// stage's work, so stashes arrive well ahead of their backward and can wait in the tier,
// and the forward rank's sends complete (freeing its memory) instead of waiting for
// receives posted late. A policy that offloads nothing returns the schedule unchanged.
//
// Rule, per rank, for each stash s = (mb, chunk) that arrives on the rank (is_stash_arrival:
// its Forward where the rank also runs the stage's backwards, else its RecvStash, as on
// PipeFB's backward ranks) and is freed by its BackwardWeight W_s:
//   keep      s stays resident when fewer than `keep` other stashes arrive on the rank
//             between its arrival and W_s; otherwise Offload(s) goes directly after the
//             arrival. (Without split stages every Forward is an arrival, so this counts
//             the Forwards in between.)
//   lookahead Prefetch(s) goes directly after the compute instruction (F, B, W) that runs
//             `lookahead` compute instructions before B_s, so exactly `lookahead` of them
//             overlap the copy back; when that would be before the Offload, it goes right
//             after it.
// A forward-only rank's stashes leave with SendStash and are never offloaded there.
// keep = 0 offloads every stash; a keep of offload_keep_limit() or more offloads none. GPipe with m
// = 8 and keep = 1 keeps only the last microbatch's stash.
//
// What it guarantees (validate()'s max_resident_stashes, which counts a stash from F to W
// except between Offload and Prefetch):
//   * at most `keep` kept stashes are alive at once on a rank (a kept stash sees fewer than
//     `keep` forwards before it is freed);
//   * a prefetched stash whose B has not run has its B within the next lookahead + 1 compute
//     instructions, so at most lookahead + 1 of them are back at once, and counting the one
//     that sits between F and its Offload, or between B and a W that directly follows it,
//     never more;
//   so with B and W adjacent (gpipe, 1f1b, interleaved-1f1b) resident stashes per rank are
//   at most keep + lookahead + 1. Schedules that defer W (zb-h1) add the stashes waiting
//   between their B and W, which stay resident.
#pragma once

#include "kernels/status.hpp"
#include "partition/schedule.hpp"

namespace spw::sched {

struct OffloadPolicy {
  int keep = 1;       // >= 0
  int lookahead = 1;  // >= 0, in compute instructions
};

// invalid_argument when keep or lookahead is negative, the schedule does not validate (its
// message, with context) or already holds Offload / Prefetch instructions. The result
// passes validate(); the pass checks that before returning it.
Result<Schedule> insert_offload(const Schedule& schedule, const OffloadPolicy& policy);

// The smallest keep with which the pass offloads nothing (0 when no stash arrives on any
// rank): keep in [0, this) are the policies that differ from no offload. For a schedule
// that validates.
int offload_keep_limit(const Schedule& schedule);

}  // namespace spw::sched
