// Proves a schedule correct by executing its lists against each other, without ranks or
// time: each rank advances while its next instruction is runnable. A receive is runnable
// once the matching send has executed; every other instruction is runnable at once (sends
// never block, so an executor must post them non-blocking for this proof to hold), but it
// is an error if its dependencies have not run before it on its own rank:
//   Forward(mb, c)        after its input: RecvAct (remote) or the previous stage's Forward;
//   BackwardInput(mb, c)  after its Forward and its output gradient: RecvGrad (remote) or
//                         the next stage's BackwardInput; nothing for the last stage;
//   BackwardWeight(mb, c) after its BackwardInput;
//   SendAct / SendGrad    after the Forward / BackwardInput producing the data;
//   Offload / Prefetch    on a resident / offloaded stash; B and W need it resident;
//   ReduceGrads(c)        only when data_parallel, after all m W passes of chunk c;
//   OptimizerStep         last, after every W pass and every ReduceGrads.
// At the end every F, B and W of every (microbatch, stage) has run exactly once on the
// stage's rank, every send was received, and every chunk was reduced (data_parallel).
// When no rank can advance before all are done, the error is a deadlock listing the
// receive each stuck rank waits on. Messages read "rank 1 [4] F0.0: ..." (position in list).
#pragma once

#include <vector>

#include "kernels/status.hpp"
#include "partition/schedule.hpp"

namespace spw::sched {

struct ValidationReport {
  // Per rank, the most stashes alive at once: a stash lives from Forward(mb, chunk) until
  // BackwardWeight(mb, chunk).
  std::vector<int> max_live_stashes;
  // The same, not counting stashes offloaded at that moment.
  std::vector<int> max_resident_stashes;
};

// invalid_argument with the first problem found.
Result<ValidationReport> validate(const Schedule& schedule);

}  // namespace spw::sched
