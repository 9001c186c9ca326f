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

// compute[rank] holds only Forward, BackwardInput and BackwardWeight instructions. Adds
// RecvAct before / SendAct after each Forward, RecvGrad before each B and SendGrad right
// after it where the neighbour stage is on another rank, ReduceGrads(c) after the last W of
// chunk c when shape.data_parallel, and OptimizerStep at the end.
// The input gradient leaves before its W runs in every schedule, also in GPipe and 1F1B
// whose W follows its B at once: the upstream stage starts its backward a W earlier, which
// takes one W per hop off the drain (the classic closed forms assume one atomic backward
// and do not count that gain; with W = 0 they hold exactly).
Schedule lower_compute_order(std::string name, const ScheduleShape& shape,
                             const std::vector<std::vector<Instruction>>& compute);

}  // namespace spw::sched
