// Proves a schedule correct by executing its lists against each other, without ranks or
// time: each rank advances while its next instruction is runnable. A receive is runnable
// once the matching send has executed; every other instruction is runnable at once (sends
// never block, so an executor must post them non-blocking for this proof to hold), but it
// is an error if its dependencies have not run before it on its own rank:
//   Forward(mb, c)        on the stage's forward rank, after its input: RecvAct (remote)
//                         or the previous stage's Forward;
//   BackwardInput(mb, c)  on the stage's backward rank, after its stash is here (its
//                         Forward on this rank, or RecvStash) and its output gradient:
//                         RecvGrad (remote) or the next stage's BackwardInput; nothing for
//                         the last stage (its loss gradient comes from the stash);
//   BackwardWeight(mb, c) after its BackwardInput;
//   SendAct / SendGrad    after the Forward / BackwardInput producing the data;
//   SendStash(mb, c)      after its Forward, with the stash resident; it leaves this rank;
//   SendParams(c)         after OptimizerStep;
//   RecvParams(c)         nothing more: it cannot complete before every Forward of its
//                         stage ran (SendParams follows OPT, which follows every W, each
//                         after the stash its Forward sent), so an iteration's forwards
//                         all use one version of the weights;
//   Offload / Prefetch    on a resident / offloaded stash of this rank; B and W need it
//                         resident;
//   ReduceGrads(c)        only when data_parallel, on a chunk that runs backwards here,
//                         after all m W passes of chunk c;
//   OptimizerStep         only on a rank running backwards, after every W pass and every
//                         ReduceGrads; nothing but SendParams may follow it;
//   DropStash(mb, c)      only in a forward_only schedule, after its Forward on this rank
//                         and, when the output goes to another rank, after its SendAct.
// At the end every F, B and W of every (microbatch, stage) has run exactly once on the
// rank the placement gives it, every send was received, every chunk that runs backwards
// was reduced (data_parallel), every rank running backwards stepped, and every stage whose
// forwards run on another rank than its backwards sent its parameters back.
// A forward_only schedule (an evaluation) may hold nothing but F, SA, RA and DS, and at the
// end every F has run and every stash has been dropped.
// When no rank can advance before all are done, the error is a deadlock listing the
// receive each stuck rank waits on. Messages read "rank 1 [4] F0.0: ..." (position in list).
#pragma once

#include <vector>

#include "kernels/status.hpp"
#include "partition/schedule.hpp"

namespace spw::sched {

struct ValidationReport {
  // Per rank, the most stashes alive at once. A stash lives on a rank from its arrival
  // (Forward, or RecvStash on a backward-only rank) until BackwardWeight there, or until
  // SendStash on a forward-only rank.
  std::vector<int> max_live_stashes;
  // The same, not counting stashes offloaded at that moment.
  std::vector<int> max_resident_stashes;
};

// invalid_argument with the first problem found (placement first, see check_placement).
Result<ValidationReport> validate(const Schedule& schedule);

}  // namespace spw::sched
