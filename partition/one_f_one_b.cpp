// 1F1B (PipeDream-Flush, Narayanan et al. 2021). Rank r first runs P - r - 1 forwards, just
// enough that the last stage's first backward gradient reaches it as its warm-up ends; from
// then on each forward is followed by the oldest pending backward, which caps the stashes
// on rank r at P - r instead of GPipe's m with the same bubble.
#include <algorithm>

#include "partition/generators.hpp"
#include "partition/schedule_builder.hpp"

namespace spw::sched {

Result<Schedule> make_1f1b(const ScheduleShape& shape) {
  SPW_TRY(check_shape("1f1b", shape, 1));
  const int m = shape.microbatches;
  std::vector<std::vector<Instruction>> compute(static_cast<std::size_t>(shape.ranks));
  for (int rank = 0; rank < shape.ranks; ++rank) {
    auto& order = compute[static_cast<std::size_t>(rank)];
    const auto backward = [&](int mb) {
      order.push_back(Instruction::backward_input(mb, 0));
      order.push_back(Instruction::backward_weight(mb, 0));
    };
    const int warmup = std::min(shape.ranks - rank - 1, m);
    for (int mb = 0; mb < warmup; ++mb) order.push_back(Instruction::forward(mb, 0));
    for (int i = 0; i + warmup < m; ++i) {
      order.push_back(Instruction::forward(warmup + i, 0));
      backward(i);
    }
    for (int mb = m - warmup; mb < m; ++mb) backward(mb);
  }
  return lower_compute_order("1f1b", shape, compute);
}

}  // namespace spw::sched
