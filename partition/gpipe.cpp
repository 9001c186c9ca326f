// GPipe: every rank runs all m forwards, then all m backwards in the same microbatch order.
// The simplest correct pipeline and the memory worst case: each rank stashes all m.
#include "partition/generators.hpp"
#include "partition/schedule_builder.hpp"

namespace spw::sched {

Result<Schedule> make_gpipe(const ScheduleShape& shape) {
  SPW_TRY(check_shape("gpipe", shape, 1));
  std::vector<std::vector<Instruction>> compute(static_cast<std::size_t>(shape.ranks));
  for (auto& order : compute) {
    for (int mb = 0; mb < shape.microbatches; ++mb) order.push_back(Instruction::forward(mb, 0));
    for (int mb = 0; mb < shape.microbatches; ++mb) {
      order.push_back(Instruction::backward_input(mb, 0));
      order.push_back(Instruction::backward_weight(mb, 0));
    }
  }
  return lower_compute_order("gpipe", shape, compute);
}

}  // namespace spw::sched
