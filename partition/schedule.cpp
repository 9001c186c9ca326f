#include "partition/schedule.hpp"

#include <algorithm>
#include <cstddef>

namespace spw::sched {

const char* op_name(Op op) {
  switch (op) {
    case Op::forward:
      return "Forward";
    case Op::backward_input:
      return "BackwardInput";
    case Op::backward_weight:
      return "BackwardWeight";
    case Op::send_act:
      return "SendAct";
    case Op::recv_act:
      return "RecvAct";
    case Op::send_grad:
      return "SendGrad";
    case Op::recv_grad:
      return "RecvGrad";
    case Op::offload:
      return "Offload";
    case Op::prefetch:
      return "Prefetch";
    case Op::reduce_grads:
      return "ReduceGrads";
    case Op::optimizer_step:
      return "OptimizerStep";
  }
  return "Unknown";
}

bool is_compute(Op op) {
  return op == Op::forward || op == Op::backward_input || op == Op::backward_weight;
}
bool is_send(Op op) { return op == Op::send_act || op == Op::send_grad; }
bool is_recv(Op op) { return op == Op::recv_act || op == Op::recv_grad; }

namespace {

const char* short_name(Op op) {
  switch (op) {
    case Op::forward:
      return "F";
    case Op::backward_input:
      return "B";
    case Op::backward_weight:
      return "W";
    case Op::send_act:
      return "SA";
    case Op::recv_act:
      return "RA";
    case Op::send_grad:
      return "SG";
    case Op::recv_grad:
      return "RG";
    case Op::offload:
      return "OF";
    case Op::prefetch:
      return "PF";
    case Op::reduce_grads:
      return "RD";
    case Op::optimizer_step:
      return "OPT";
  }
  return "?";
}

}  // namespace

// Appends piece by piece: GCC 12 at -O3 warns falsely (-Wrestrict) on "literal" + string.
std::string to_string(const Instruction& instruction) {
  std::string out = short_name(instruction.op);
  if (instruction.op == Op::optimizer_step) return out;
  if (instruction.op != Op::reduce_grads) {
    out += std::to_string(instruction.mb);
    out += '.';
  }
  out += std::to_string(instruction.chunk);
  if (is_send(instruction.op) || is_recv(instruction.op)) {
    out += is_send(instruction.op) ? '>' : '<';
    out += std::to_string(instruction.peer);
  }
  return out;
}

std::string to_string(const Schedule& schedule) {
  std::size_t width = 1;
  for (const auto& list : schedule.lists)
    for (const auto& instruction : list) width = std::max(width, to_string(instruction).size());
  std::string out = schedule.name + " P=" + std::to_string(schedule.ranks) +
                    " m=" + std::to_string(schedule.microbatches) +
                    " v=" + std::to_string(schedule.chunks) +
                    (schedule.data_parallel ? " data-parallel" : "") + "\n";
  for (std::size_t rank = 0; rank < schedule.lists.size(); ++rank) {
    out += "rank " + std::to_string(rank) + ":";
    for (const auto& instruction : schedule.lists[rank]) {
      const std::string cell = to_string(instruction);
      out += " " + cell + std::string(width - cell.size(), ' ');
    }
    out += "\n";
  }
  return out;
}

Result<Transfer> transfer_of(const Schedule& schedule, int rank, const Instruction& instruction) {
  const std::string where = to_string(instruction);
  if (!is_send(instruction.op) && !is_recv(instruction.op))
    return error(StatusCode::invalid_argument, where + ": not a send or receive");
  if (instruction.chunk < 0 || instruction.chunk >= schedule.chunks)
    return error(StatusCode::invalid_argument,
                 where + ": chunk " + std::to_string(instruction.chunk) + " outside [0, " +
                     std::to_string(schedule.chunks) + ")");
  if (instruction.mb < 0 || instruction.mb >= schedule.microbatches)
    return error(StatusCode::invalid_argument,
                 where + ": microbatch " + std::to_string(instruction.mb) + " outside [0, " +
                     std::to_string(schedule.microbatches) + ")");

  const int own = schedule.stage(rank, instruction.chunk);
  // The sender names its own stage, the receiver the stage it feeds; step is the direction
  // the data travels in stage numbers.
  const bool gradient = instruction.op == Op::send_grad || instruction.op == Op::recv_grad;
  const int step = gradient ? -1 : +1;
  const bool sending = is_send(instruction.op);
  const int other = sending ? own + step : own - step;
  if (other < 0 || other >= schedule.stages())
    return error(StatusCode::invalid_argument, where + ": stage " + std::to_string(own) +
                                                   " has no " + (other < 0 ? "previous" : "next") +
                                                   " stage");
  const int other_rank = schedule.rank_of(other);
  if (other_rank == rank)
    return error(StatusCode::invalid_argument,
                 where + ": stage " + std::to_string(other) + " is on this rank; no transfer");
  if (instruction.peer != other_rank)
    return error(StatusCode::invalid_argument, where + ": peer should be rank " +
                                                   std::to_string(other_rank) + " (stage " +
                                                   std::to_string(other) + ")");
  Transfer transfer{gradient, instruction.mb, sending ? own : other, sending ? other : own};
  return transfer;
}

}  // namespace spw::sched
