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
    case Op::send_stash:
      return "SendStash";
    case Op::recv_stash:
      return "RecvStash";
    case Op::send_params:
      return "SendParams";
    case Op::recv_params:
      return "RecvParams";
    case Op::drop_stash:
      return "DropStash";
  }
  return "Unknown";
}

bool is_compute(Op op) {
  return op == Op::forward || op == Op::backward_input || op == Op::backward_weight;
}
bool is_send(Op op) {
  return op == Op::send_act || op == Op::send_grad || op == Op::send_stash ||
         op == Op::send_params;
}
bool is_recv(Op op) {
  return op == Op::recv_act || op == Op::recv_grad || op == Op::recv_stash ||
         op == Op::recv_params;
}
bool posted_when_reached(const std::vector<Instruction>& list, std::size_t position) {
  const Instruction& in = list[position];
  if (in.op == Op::recv_params) return true;
  if (in.op != Op::recv_stash || position + 1 >= list.size()) return false;
  const Instruction& next = list[position + 1];
  return next.op == Op::offload && next.mb == in.mb && next.chunk == in.chunk;
}
bool uses_microbatch(Op op) {
  return op != Op::reduce_grads && op != Op::optimizer_step && op != Op::send_params &&
         op != Op::recv_params;
}
bool uses_chunk(Op op) { return op != Op::optimizer_step; }

const char* payload_name(Payload payload) {
  switch (payload) {
    case Payload::activation:
      return "activation";
    case Payload::gradient:
      return "gradient";
    case Payload::stash:
      return "stash";
    case Payload::parameters:
      return "parameters";
  }
  return "unknown";
}

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
    case Op::send_stash:
      return "SS";
    case Op::recv_stash:
      return "RS";
    case Op::send_params:
      return "SP";
    case Op::recv_params:
      return "RP";
    case Op::drop_stash:
      return "DS";
  }
  return "?";
}

}  // namespace

// Appends piece by piece: GCC 12 at -O3 warns falsely (-Wrestrict) on "literal" + string.
std::string to_string(const Instruction& instruction) {
  std::string out = short_name(instruction.op);
  if (!uses_chunk(instruction.op)) return out;
  if (uses_microbatch(instruction.op)) {
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
  // P is the rank count of a classic schedule; a placed one has its own stage count.
  std::string out = schedule.name +
                    (schedule.placed() ? " ranks=" + std::to_string(schedule.ranks) +
                                             " stages=" + std::to_string(schedule.stages())
                                       : " P=" + std::to_string(schedule.ranks)) +
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

int Schedule::stage(int rank, int chunk) const {
  if (!placed()) return chunk * ranks + rank;
  for (std::size_t s = 0; s < placement.size(); ++s) {
    const StagePlacement& p = placement[s];
    if ((p.forward_rank == rank && p.forward_chunk == chunk) ||
        (p.backward_rank == rank && p.backward_chunk == chunk))
      return static_cast<int>(s);
  }
  return -1;
}

int Schedule::stage_of(int rank, int chunk, Direction direction) const {
  const int s = stage(rank, chunk);
  if (s < 0 || rank_of(s, direction) != rank || chunk_of(s, direction) != chunk) return -1;
  return s;
}

StageIndex::StageIndex(const Schedule& schedule) : schedule_(&schedule) {
  if (!schedule.placed()) return;
  const int chunks = schedule.chunks;
  stage_.assign(static_cast<std::size_t>(schedule.ranks * chunks), -1);
  const auto mark = [&](int rank, int chunk, int stage) {
    if (rank < 0 || rank >= schedule.ranks || chunk < 0 || chunk >= chunks) return;
    stage_[static_cast<std::size_t>(rank * chunks + chunk)] = stage;
  };
  // Backwards, so that the first stage naming a (rank, chunk) wins, as in Schedule::stage.
  for (int s = schedule.stages() - 1; s >= 0; --s) {
    const StagePlacement& p = schedule.placement[static_cast<std::size_t>(s)];
    mark(p.backward_rank, p.backward_chunk, s);
    mark(p.forward_rank, p.forward_chunk, s);
  }
}

int StageIndex::stage(int rank, int chunk) const {
  if (!schedule_->placed()) return schedule_->stage(rank, chunk);
  if (rank < 0 || rank >= schedule_->ranks || chunk < 0 || chunk >= schedule_->chunks) return -1;
  return stage_[static_cast<std::size_t>(rank * schedule_->chunks + chunk)];
}

int StageIndex::stage_of(int rank, int chunk, Direction direction) const {
  const int s = stage(rank, chunk);
  if (s < 0 || schedule_->rank_of(s, direction) != rank ||
      schedule_->chunk_of(s, direction) != chunk)
    return -1;
  return s;
}

int Schedule::chunks_on(int rank) const {
  if (!placed()) return chunks;
  int count = 0;
  for (const StagePlacement& p : placement) {
    if (p.forward_rank == rank) count = std::max(count, p.forward_chunk + 1);
    if (p.backward_rank == rank) count = std::max(count, p.backward_chunk + 1);
  }
  return count;
}

bool Schedule::runs_backward(int rank) const {
  if (!placed()) return rank >= 0 && rank < ranks;
  return std::any_of(placement.begin(), placement.end(),
                     [&](const StagePlacement& p) { return p.backward_rank == rank; });
}

Status check_placement(const Schedule& schedule) {
  if (!schedule.placed()) return Status::success();
  const std::string prefix = "schedule '" + schedule.name + "': ";
  const auto range = [](int value, int end) {
    return std::to_string(value) + " outside [0, " + std::to_string(end) + ")";
  };
  // owner[rank * chunks + chunk]: the stage that (rank, chunk) serves.
  std::vector<int> owner(static_cast<std::size_t>(schedule.ranks * schedule.chunks), -1);
  for (int stage = 0; stage < schedule.stages(); ++stage) {
    const StagePlacement& p = schedule.placement[static_cast<std::size_t>(stage)];
    const std::string at = prefix + "stage " + std::to_string(stage) + " ";
    for (const Direction direction : {Direction::forward, Direction::backward}) {
      const char* which = direction == Direction::forward ? "forward" : "backward";
      const int rank = schedule.rank_of(stage, direction);
      const int chunk = schedule.chunk_of(stage, direction);
      if (rank < 0 || rank >= schedule.ranks)
        return error(StatusCode::invalid_argument,
                     at + which + " rank " + range(rank, schedule.ranks));
      if (chunk < 0 || chunk >= schedule.chunks)
        return error(StatusCode::invalid_argument,
                     at + which + " chunk " + range(chunk, schedule.chunks));
      int& slot = owner[static_cast<std::size_t>(rank * schedule.chunks + chunk)];
      if (slot != -1 && slot != stage)
        return error(StatusCode::invalid_argument,
                     at + "shares chunk " + std::to_string(chunk) + " of rank " +
                         std::to_string(rank) + " with stage " + std::to_string(slot));
      slot = stage;
    }
    if (p.forward_rank == p.backward_rank && p.forward_chunk != p.backward_chunk)
      return error(StatusCode::invalid_argument,
                   at + "runs both directions on rank " + std::to_string(p.forward_rank) +
                       " but under chunks " + std::to_string(p.forward_chunk) + " and " +
                       std::to_string(p.backward_chunk));
  }
  // Executors index their chunks by number: a gap would be a chunk holding nothing.
  for (int rank = 0; rank < schedule.ranks; ++rank) {
    bool gap = false;
    for (int chunk = 0; chunk < schedule.chunks; ++chunk) {
      const bool used = owner[static_cast<std::size_t>(rank * schedule.chunks + chunk)] != -1;
      if (used && gap)
        return error(StatusCode::invalid_argument,
                     prefix + "rank " + std::to_string(rank) + " holds chunk " +
                         std::to_string(chunk) + " but not chunk " + std::to_string(chunk - 1) +
                         " (number a rank's chunks 0, 1, ... without gaps)");
      gap = gap || !used;
    }
  }
  return Status::success();
}

bool is_stash_arrival(const Schedule& schedule, int rank, const Instruction& instruction) {
  if (instruction.op == Op::recv_stash) return true;
  if (instruction.op != Op::forward) return false;
  const int stage = schedule.stage_of(rank, instruction.chunk, Direction::forward);
  return stage >= 0 && schedule.backward_rank_of(stage) == rank;
}

namespace {

// Which payload an op moves, and which direction's passes the op's own chunk must run.
struct Ends {
  Payload payload;
  Direction own;
};

Ends ends_of(Op op) {
  switch (op) {
    case Op::send_act:
    case Op::recv_act:
      return {Payload::activation, Direction::forward};
    case Op::send_grad:
    case Op::recv_grad:
      return {Payload::gradient, Direction::backward};
    case Op::send_stash:
      return {Payload::stash, Direction::forward};
    case Op::recv_stash:
      return {Payload::stash, Direction::backward};
    case Op::send_params:
      return {Payload::parameters, Direction::backward};
    case Op::recv_params:
      return {Payload::parameters, Direction::forward};
    case Op::forward:
    case Op::backward_input:
    case Op::backward_weight:
    case Op::offload:
    case Op::prefetch:
    case Op::reduce_grads:
    case Op::optimizer_step:
    case Op::drop_stash:
      break;  // not transfers; transfer_of rejects them first
  }
  return {Payload::activation, Direction::forward};
}

}  // namespace

Result<Transfer> transfer_of(const Schedule& schedule, int rank, const Instruction& instruction) {
  return transfer_of(schedule, StageIndex(schedule), rank, instruction);
}

Result<Transfer> transfer_of(const Schedule& schedule, const StageIndex& index, int rank,
                             const Instruction& instruction) {
  // Named only on failure: the simulator asks for every transfer of every candidate plan.
  const auto where = [&] { return to_string(instruction); };
  if (!is_send(instruction.op) && !is_recv(instruction.op))
    return error(StatusCode::invalid_argument, where() + ": not a send or receive");
  if (instruction.chunk < 0 || instruction.chunk >= schedule.chunks)
    return error(StatusCode::invalid_argument,
                 where() + ": chunk " + std::to_string(instruction.chunk) + " outside [0, " +
                     std::to_string(schedule.chunks) + ")");
  const bool per_microbatch = uses_microbatch(instruction.op);
  if (per_microbatch && (instruction.mb < 0 || instruction.mb >= schedule.microbatches))
    return error(StatusCode::invalid_argument,
                 where() + ": microbatch " + std::to_string(instruction.mb) + " outside [0, " +
                     std::to_string(schedule.microbatches) + ")");

  const Ends ends = ends_of(instruction.op);
  const int own = index.stage_of(rank, instruction.chunk, ends.own);
  if (own < 0) {
    const int served = index.stage(rank, instruction.chunk);
    if (served < 0)
      return error(StatusCode::invalid_argument,
                   where() + ": chunk " + std::to_string(instruction.chunk) +
                       " holds no stage on this rank");
    return error(StatusCode::invalid_argument,
                 where() + ": this rank runs no " +
                     (ends.own == Direction::forward ? "forward" : "backward") +
                     " passes of stage " + std::to_string(served));
  }
  const bool sending = is_send(instruction.op);
  // Activations and gradients cross to a neighbouring stage (step is the direction the data
  // travels in stage numbers; the sender names its own stage, the receiver the stage it
  // feeds); a stash or parameters cross between the two directions of one stage.
  const bool between_stages =
      ends.payload == Payload::activation || ends.payload == Payload::gradient;
  const int step = ends.payload == Payload::gradient ? -1 : +1;
  const int other = !between_stages ? own : sending ? own + step : own - step;
  const Direction other_direction =
      between_stages ? ends.own
                     : (ends.own == Direction::forward ? Direction::backward : Direction::forward);
  if (other < 0 || other >= schedule.stages())
    return error(StatusCode::invalid_argument, where() + ": stage " + std::to_string(own) +
                                                   " has no " + (other < 0 ? "previous" : "next") +
                                                   " stage");
  const int other_rank = schedule.rank_of(other, other_direction);
  if (other_rank == rank)
    return error(StatusCode::invalid_argument,
                 where() + ": stage " + std::to_string(other) +
                     (between_stages ? " is on this rank" : " runs both directions on this rank") +
                     "; no transfer");
  if (instruction.peer != other_rank)
    return error(StatusCode::invalid_argument, where() + ": peer should be rank " +
                                                   std::to_string(other_rank) + " (stage " +
                                                   std::to_string(other) + ")");
  Transfer transfer{ends.payload, per_microbatch ? instruction.mb : -1, sending ? own : other,
                    sending ? other : own};
  return transfer;
}

}  // namespace spw::sched
