// What every generator shares: checking its shape and turning a per-rank order of compute
// passes into full instruction lists. Generators decide only the order of F, B and W; the
// communication, reduces and optimizer step follow from placement, so they are added here
// once instead of being re-derived (and possibly mis-derived) by each generator. Classic
// placement only: a schedule that splits a stage over two ranks (PipeFB) writes its lists
// itself.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kernels/status.hpp"
#include "partition/generators.hpp"
#include "partition/schedule.hpp"

namespace spw::sched {

// invalid_argument naming the generator and the offending value when P < 1, m < 1, v < 1,
// or v differs from the only value the generator supports (required_chunks > 0).
Status check_shape(std::string_view generator, const ScheduleShape& shape, int required_chunks);

// When the input gradient leaves the rank. `fused`: after the W that follows its B, as when
// the backward is one autograd call and the closed forms of GPipe and 1F1B hold. `split`:
// right after B, taking W off the critical path (zero-bubble schedules).
enum class BackwardSplit { fused, split };

// compute[rank] holds only Forward, BackwardInput and BackwardWeight instructions; with
// `fused` every B is immediately followed by the W of the same (mb, chunk). Adds RecvAct
// before / SendAct after each Forward, RecvGrad before each B and SendGrad after it (or
// after its W) where the neighbour stage is on another rank, ReduceGrads(c) after the last
// W of chunk c when shape.data_parallel, and OptimizerStep at the end.
Schedule lower_compute_order(std::string name, const ScheduleShape& shape, BackwardSplit split,
                             const std::vector<std::vector<Instruction>>& compute);

}  // namespace spw::sched
