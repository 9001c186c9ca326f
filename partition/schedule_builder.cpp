#include "partition/schedule_builder.hpp"

#include <cstddef>
#include <utility>

namespace spw::sched {

Status check_shape(std::string_view generator, const ScheduleShape& shape, int required_chunks) {
  const std::string name(generator);
  if (shape.ranks < 1)
    return error(StatusCode::invalid_argument,
                 name + ": ranks (P) must be >= 1, got " + std::to_string(shape.ranks));
  if (shape.microbatches < 1)
    return error(StatusCode::invalid_argument, name + ": microbatches (m) must be >= 1, got " +
                                                   std::to_string(shape.microbatches));
  if (shape.chunks < 1)
    return error(StatusCode::invalid_argument,
                 name + ": chunks (v) must be >= 1, got " + std::to_string(shape.chunks));
  if (required_chunks > 0 && shape.chunks != required_chunks)
    return error(StatusCode::invalid_argument, name + ": chunks (v) must be " +
                                                   std::to_string(required_chunks) + ", got " +
                                                   std::to_string(shape.chunks));
  return Status::success();
}

Schedule lower_compute_order(std::string name, const ScheduleShape& shape,
                             const std::vector<std::vector<Instruction>>& compute) {
  Schedule schedule;
  schedule.name = std::move(name);
  schedule.ranks = shape.ranks;
  schedule.microbatches = shape.microbatches;
  schedule.chunks = shape.chunks;
  schedule.data_parallel = shape.data_parallel;
  schedule.lists.resize(static_cast<std::size_t>(shape.ranks));

  for (int rank = 0; rank < shape.ranks; ++rank) {
    const auto& order = compute[static_cast<std::size_t>(rank)];
    // The reduce of a chunk goes right after its last W so it overlaps the remaining passes.
    std::vector<std::size_t> last_weight(static_cast<std::size_t>(shape.chunks), order.size());
    for (std::size_t i = 0; i < order.size(); ++i)
      if (order[i].op == Op::backward_weight)
        last_weight[static_cast<std::size_t>(order[i].chunk)] = i;

    auto& list = schedule.lists[static_cast<std::size_t>(rank)];
    for (std::size_t i = 0; i < order.size(); ++i) {
      const Instruction& pass = order[i];
      const int stage = schedule.stage(rank, pass.chunk);
      const bool has_prev = stage > 0;
      const bool has_next = stage + 1 < schedule.stages();
      const int prev_rank = has_prev ? schedule.rank_of(stage - 1) : rank;
      const int next_rank = has_next ? schedule.rank_of(stage + 1) : rank;
      switch (pass.op) {
        case Op::forward:
          if (prev_rank != rank)
            list.push_back(Instruction::recv_act(pass.mb, pass.chunk, prev_rank));
          list.push_back(pass);
          if (next_rank != rank)
            list.push_back(Instruction::send_act(pass.mb, pass.chunk, next_rank));
          break;
        case Op::backward_input:
          if (next_rank != rank)
            list.push_back(Instruction::recv_grad(pass.mb, pass.chunk, next_rank));
          list.push_back(pass);
          if (prev_rank != rank)
            list.push_back(Instruction::send_grad(pass.mb, pass.chunk, prev_rank));
          break;
        default:
          list.push_back(pass);
          break;
      }
      if (shape.data_parallel && pass.op == Op::backward_weight &&
          last_weight[static_cast<std::size_t>(pass.chunk)] == i)
        list.push_back(Instruction::reduce_grads(pass.chunk));
    }
    list.push_back(Instruction::optimizer_step());
  }
  return schedule;
}

}  // namespace spw::sched
