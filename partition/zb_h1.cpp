// ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", section 2.1). Splitting the
// backward into B (input gradient) and W (weight gradient) takes W off the critical path:
// the gradient travels back through the ranks at the pace of B alone. Rank r keeps 1F1B's
// P - r - 1 warm-up forwards but may hold r more stashes before running a W, so every rank
// holds at most P in flight, the first rank's 1F1B peak. In the steady phase a rank runs
// F, B and then a W once more than r are pending; in the cool-down a W follows every B (it
// fills the wait for the next gradient) and the last ones close the iteration, where 1F1B
// would idle. With equal F, B and W times the bubble is (P-1)(F+B-W) instead of 1F1B's
// (P-1)(F+B+W): a third. With unequal ones it is (P-1) max(F, B, F+B-W) (equal stages, m >=
// P; partition/README.md says why the first two are floors for this stash limit, and
// tests/partition/test_schedule_search.cpp that no list within it does better).
#include <algorithm>
#include <deque>

#include "partition/generators.hpp"
#include "partition/schedule_builder.hpp"

namespace spw::sched {

Result<Schedule> make_zb_h1(const ScheduleShape& shape) {
  SPW_TRY(check_shape("zb-h1", shape, 1));
  const int m = shape.microbatches;
  std::vector<std::vector<Instruction>> compute(static_cast<std::size_t>(shape.ranks));
  for (int rank = 0; rank < shape.ranks; ++rank) {
    auto& order = compute[static_cast<std::size_t>(rank)];
    std::deque<int> pending;  // microbatches whose W has not run
    const auto weight = [&] {
      order.push_back(Instruction::backward_weight(pending.front(), 0));
      pending.pop_front();
    };
    const auto backward = [&](int mb) {
      order.push_back(Instruction::backward_input(mb, 0));
      pending.push_back(mb);
    };
    const int warmup = std::min(shape.ranks - rank - 1, m);
    const auto deferred = static_cast<std::size_t>(rank);
    for (int mb = 0; mb < warmup; ++mb) order.push_back(Instruction::forward(mb, 0));
    for (int i = 0; i + warmup < m; ++i) {
      order.push_back(Instruction::forward(warmup + i, 0));
      backward(i);
      if (pending.size() > deferred) weight();
    }
    for (int mb = m - warmup; mb < m; ++mb) {
      backward(mb);
      weight();
    }
    while (!pending.empty()) weight();
  }
  return lower_compute_order("zb-h1", shape, compute);
}

}  // namespace spw::sched
