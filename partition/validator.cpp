#include "partition/validator.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace spw::sched {

namespace {

constexpr int kNone = -1;  // "has not run" in the position tables

// Where a stash is: resident or offloaded on the rank in holder_, in flight from a
// forward-only rank to the backward rank (sent), or gone.
enum class Stash : std::uint8_t { none, resident, offloaded, sent, freed };

// Executes the lists in the order described in validator.hpp. Tables indexed by
// (microbatch, stage) hold the list position where something happened, or kNone; transfers
// are indexed by their sending stage (parameters by stage alone).
class Replay {
 public:
  explicit Replay(const Schedule& schedule)
      : s_(schedule),
        index_(schedule),
        P_(static_cast<std::size_t>(schedule.ranks)),
        cells_(static_cast<std::size_t>(schedule.microbatches * schedule.stages())),
        forward_(cells_, kNone),
        dropped_(cells_, kNone),
        input_(cells_, kNone),
        weight_(cells_, kNone),
        stash_(cells_, Stash::none),
        holder_(cells_, kNone),
        live_(P_, 0),
        resident_(P_, 0),
        report_{std::vector<int>(P_, 0), std::vector<int>(P_, 0)},
        weights_done_(P_ * static_cast<std::size_t>(schedule.chunks), 0),
        reduced_(P_ * static_cast<std::size_t>(schedule.chunks), kNone),
        stepped_(P_, kNone) {
    sent_.fill(std::vector<int>(cells_, kNone));
    received_.fill(std::vector<int>(cells_, kNone));
  }

  Result<ValidationReport> run();

 private:
  std::size_t cell(int mb, int stage) const {
    return static_cast<std::size_t>(mb * s_.stages() + stage);
  }
  std::size_t slot(int rank, int chunk) const {
    return static_cast<std::size_t>(rank * s_.chunks + chunk);
  }
  // Parameters have no microbatch: one per stage, and stages < cells_.
  std::size_t key(const Transfer& transfer) const {
    return transfer.payload == Payload::parameters
               ? static_cast<std::size_t>(transfer.from_stage)
               : cell(transfer.mb, transfer.from_stage);
  }
  std::vector<int>& sent(Payload payload) { return sent_[static_cast<std::size_t>(payload)]; }
  const std::vector<int>& sent(Payload payload) const {
    return sent_[static_cast<std::size_t>(payload)];
  }
  std::vector<int>& received(Payload payload) {
    return received_[static_cast<std::size_t>(payload)];
  }
  const std::vector<int>& received(Payload payload) const {
    return received_[static_cast<std::size_t>(payload)];
  }
  const Instruction& at(int rank, int index) const {
    return s_.lists[static_cast<std::size_t>(rank)][static_cast<std::size_t>(index)];
  }
  std::string where(int rank, int index) const {
    return "rank " + std::to_string(rank) + " [" + std::to_string(index) + "] " +
           to_string(at(rank, index));
  }
  Status fail(int rank, int index, const std::string& reason) const {
    return error(StatusCode::invalid_argument, where(rank, index) + ": " + reason);
  }
  // transfer_of already names the instruction; add where it sits.
  Status located(int rank, int index, const Status& status) const {
    return error(status.code(), "rank " + std::to_string(rank) + " [" + std::to_string(index) +
                                    "] " + status.message());
  }

  Status check_fields(int rank, int index) const;
  // The stage the compute instruction at `index` works on, or why it may not run here.
  Result<int> compute_stage(int rank, int index, Direction direction) const;
  // Whether the receive at the head of `rank` can complete now; errors for a malformed one.
  Result<bool> receivable(int rank, int index) const;
  Status execute(int rank, int index);
  Status execute_forward(int rank, int index);
  Status execute_backward(int rank, int index);
  Status execute_transfer(int rank, int index);
  Status execute_send(int rank, int index, const Transfer& transfer);
  Status execute_receive(int rank, int index, const Transfer& transfer);
  Status execute_stash_move(int rank, int index);
  Status execute_update(int rank, int index);
  Status execute_drop(int rank, int index);
  Status check_complete() const;
  Status check_evaluation_complete() const;
  void count_stashes(int rank, int live_delta, int resident_delta);

  const Schedule& s_;
  const StageIndex index_;
  std::size_t P_, cells_;  // P_: ranks (lists), not stages
  std::vector<int> forward_, dropped_, input_, weight_;
  std::array<std::vector<int>, kPayloads> sent_, received_;  // [payload]
  std::vector<Stash> stash_;
  std::vector<int> holder_;
  std::vector<int> live_, resident_;
  ValidationReport report_;
  std::vector<int> weights_done_, reduced_;
  std::vector<int> stepped_;
};

Status Replay::check_fields(int rank, int index) const {
  const Instruction& in = at(rank, index);
  const bool uses_mb = uses_microbatch(in.op);
  const bool uses_chunk_field = uses_chunk(in.op);
  const bool uses_peer = is_send(in.op) || is_recv(in.op);
  if (uses_chunk_field && (in.chunk < 0 || in.chunk >= s_.chunks))
    return fail(rank, index, "chunk outside [0, " + std::to_string(s_.chunks) + ")");
  if (uses_mb && (in.mb < 0 || in.mb >= s_.microbatches))
    return fail(rank, index, "microbatch outside [0, " + std::to_string(s_.microbatches) + ")");
  if ((!uses_mb && in.mb != -1) || (!uses_chunk_field && in.chunk != -1) ||
      (!uses_peer && in.peer != -1))
    return fail(rank, index, "sets a field its operation does not use");
  return Status::success();
}

Result<int> Replay::compute_stage(int rank, int index, Direction direction) const {
  const Instruction& in = at(rank, index);
  const int stage = index_.stage_of(rank, in.chunk, direction);
  if (stage >= 0) return stage;
  const int served = index_.stage(rank, in.chunk);
  if (served < 0)
    return fail(rank, index,
                "chunk " + std::to_string(in.chunk) + " holds no stage on this rank");
  return fail(rank, index,
              std::string("this rank runs no ") +
                  (direction == Direction::forward ? "forward" : "backward") +
                  " passes of stage " + std::to_string(served));
}

Result<bool> Replay::receivable(int rank, int index) const {
  SPW_TRY(check_fields(rank, index));
  auto transfer = transfer_of(s_, index_, rank, at(rank, index));
  if (!transfer.ok()) return located(rank, index, transfer.status());
  const std::size_t k = key(*transfer);
  const auto& got = received(transfer->payload);
  if (got[k] != kNone)
    return fail(rank, index, "received twice (first at [" + std::to_string(got[k]) + "])");
  return sent(transfer->payload)[k] != kNone;
}

void Replay::count_stashes(int rank, int live_delta, int resident_delta) {
  const auto r = static_cast<std::size_t>(rank);
  live_[r] += live_delta;
  resident_[r] += resident_delta;
  report_.max_live_stashes[r] = std::max(report_.max_live_stashes[r], live_[r]);
  report_.max_resident_stashes[r] = std::max(report_.max_resident_stashes[r], resident_[r]);
}

Status Replay::execute_forward(int rank, int index) {
  const Instruction& in = at(rank, index);
  SPW_ASSIGN_OR_RETURN(const int stage, compute_stage(rank, index, Direction::forward));
  const std::size_t c = cell(in.mb, stage);
  const std::string mbc = std::to_string(in.mb) + "." + std::to_string(in.chunk);
  if (forward_[c] != kNone)
    return fail(rank, index, "runs twice (first at [" + std::to_string(forward_[c]) + "])");
  if (stage > 0) {
    const int prev_rank = s_.forward_rank_of(stage - 1);
    if (prev_rank == rank && forward_[cell(in.mb, stage - 1)] == kNone)
      return fail(rank, index,
                  "its input F" + std::to_string(in.mb) + "." +
                      std::to_string(s_.chunk_of(stage - 1, Direction::forward)) + " has not run");
    if (prev_rank != rank && received(Payload::activation)[cell(in.mb, stage - 1)] == kNone)
      return fail(rank, index,
                  "its input has not arrived (no RA" + mbc + "<" + std::to_string(prev_rank) +
                      " before it)");
  }
  stash_[c] = Stash::resident;
  holder_[c] = rank;
  count_stashes(rank, +1, +1);
  forward_[c] = index;
  return Status::success();
}

Status Replay::execute_backward(int rank, int index) {
  const Instruction& in = at(rank, index);
  SPW_ASSIGN_OR_RETURN(const int stage, compute_stage(rank, index, Direction::backward));
  const std::size_t c = cell(in.mb, stage);
  const std::string mbc = std::to_string(in.mb) + "." + std::to_string(in.chunk);
  const bool input = in.op == Op::backward_input;
  auto& done = input ? input_ : weight_;
  if (done[c] != kNone)
    return fail(rank, index, "runs twice (first at [" + std::to_string(done[c]) + "])");

  if (input) {
    const int forward_rank = s_.forward_rank_of(stage);
    if (forward_rank == rank && forward_[c] == kNone)
      return fail(rank, index, "runs before F" + mbc);
    if (forward_rank != rank && received(Payload::stash)[c] == kNone)
      return fail(rank, index,
                  "its stash has not arrived (no RS" + mbc + "<" + std::to_string(forward_rank) +
                      " before it)");
  } else if (input_[c] == kNone) {
    return fail(rank, index, "runs before B" + mbc);
  }
  // After F or RecvStash on this rank the stash can only be resident, offloaded or freed.
  if (stash_[c] != Stash::resident)
    return fail(rank, index, "its stash is offloaded (no PF" + mbc + " before it)");

  if (input && stage + 1 < s_.stages()) {
    const int next_rank = s_.backward_rank_of(stage + 1);
    if (next_rank == rank && input_[cell(in.mb, stage + 1)] == kNone)
      return fail(rank, index,
                  "its output gradient B" + std::to_string(in.mb) + "." +
                      std::to_string(s_.chunk_of(stage + 1, Direction::backward)) +
                      " has not run");
    if (next_rank != rank && received(Payload::gradient)[cell(in.mb, stage + 1)] == kNone)
      return fail(rank, index,
                  "its output gradient has not arrived (no RG" + mbc + "<" +
                      std::to_string(next_rank) + " before it)");
  }
  if (!input) {
    stash_[c] = Stash::freed;
    holder_[c] = kNone;
    count_stashes(rank, -1, -1);
    ++weights_done_[slot(rank, in.chunk)];
  }
  done[c] = index;
  return Status::success();
}

Status Replay::execute_send(int rank, int index, const Transfer& transfer) {
  const Instruction& in = at(rank, index);
  const std::size_t k = key(transfer);
  const std::string mbc = std::to_string(in.mb) + "." + std::to_string(in.chunk);
  switch (transfer.payload) {
    case Payload::activation:
    case Payload::stash:
      if (forward_[k] == kNone)
        return fail(rank, index, "sends before F" + mbc + " produced the data");
      break;
    case Payload::gradient:
      if (input_[k] == kNone)
        return fail(rank, index, "sends before B" + mbc + " produced the data");
      break;
    case Payload::parameters:
      if (stepped_[static_cast<std::size_t>(rank)] == kNone)
        return fail(rank, index, "sends before OPT updated the parameters");
      break;
  }
  auto& done = sent(transfer.payload);
  if (done[k] != kNone)
    return fail(rank, index, "sent twice (first at [" + std::to_string(done[k]) + "])");
  if (transfer.payload == Payload::stash) {
    // The stash leaves the forward rank: it may not sit offloaded there.
    if (stash_[k] != Stash::resident || holder_[k] != rank)
      return fail(rank, index, "its stash is offloaded (no PF" + mbc + " before it)");
    stash_[k] = Stash::sent;
    holder_[k] = kNone;
    count_stashes(rank, -1, -1);
  }
  done[k] = index;
  return Status::success();
}

// No check that RecvParams follows the chunk's forwards: it cannot complete earlier, since
// its SendParams follows OPT, which follows every W of the stage, each after a RecvStash
// that waits for the SendStash after that microbatch's Forward.
Status Replay::execute_receive(int rank, int index, const Transfer& transfer) {
  const std::size_t k = key(transfer);
  if (transfer.payload == Payload::stash) {
    stash_[k] = Stash::resident;
    holder_[k] = rank;
    count_stashes(rank, +1, +1);
  }
  received(transfer.payload)[k] = index;
  return Status::success();
}

Status Replay::execute_transfer(int rank, int index) {
  auto transfer = transfer_of(s_, index_, rank, at(rank, index));
  if (!transfer.ok()) return located(rank, index, transfer.status());
  if (is_recv(at(rank, index).op)) return execute_receive(rank, index, *transfer);
  return execute_send(rank, index, *transfer);
}

Status Replay::execute_stash_move(int rank, int index) {
  const Instruction& in = at(rank, index);
  const int stage = index_.stage(rank, in.chunk);
  if (stage < 0)
    return fail(rank, index, "chunk " + std::to_string(in.chunk) + " holds no stage on this rank");
  const std::size_t c = cell(in.mb, stage);
  Stash& stash = stash_[c];
  const bool here = holder_[c] == rank;
  if (in.op == Op::offload) {
    if (stash != Stash::resident || !here)
      return fail(rank, index, "no resident stash to offload (not forwarded, offloaded or freed)");
    stash = Stash::offloaded;
    count_stashes(rank, 0, -1);
  } else {
    if (stash != Stash::offloaded || !here)
      return fail(rank, index, "no offloaded stash to prefetch");
    stash = Stash::resident;
    count_stashes(rank, 0, +1);
  }
  return Status::success();
}

Status Replay::execute_update(int rank, int index) {
  const Instruction& in = at(rank, index);
  const auto r = static_cast<std::size_t>(rank);
  if (in.op == Op::reduce_grads) {
    if (!s_.data_parallel)
      return fail(rank, index, "schedule has no data-parallel replicas to reduce with");
    if (index_.stage_of(rank, in.chunk, Direction::backward) < 0)
      return fail(rank, index,
                  "chunk " + std::to_string(in.chunk) +
                      " runs no backward passes on this rank, so it has no gradients to reduce");
    int& reduced = reduced_[slot(rank, in.chunk)];
    if (reduced != kNone)
      return fail(rank, index, "runs twice (first at [" + std::to_string(reduced) + "])");
    const int done = weights_done_[slot(rank, in.chunk)];
    if (done < s_.microbatches)
      return fail(rank, index,
                  "runs after only " + std::to_string(done) + " of " +
                      std::to_string(s_.microbatches) + " W passes of its chunk");
    reduced = index;
    return Status::success();
  }
  if (!s_.runs_backward(rank))
    return fail(rank, index,
                "this rank runs no backward passes, so it has no gradients to apply");
  if (stepped_[r] != kNone)
    return fail(rank, index, "runs twice (first at [" + std::to_string(stepped_[r]) + "])");
  // The updated parameters can only leave after the step.
  const auto& list = s_.lists[r];
  for (std::size_t i = static_cast<std::size_t>(index) + 1; i < list.size(); ++i)
    if (list[i].op != Op::send_params)
      return fail(rank, index, "is not the last instruction of the rank");
  for (int chunk = 0; chunk < s_.chunks; ++chunk) {
    if (index_.stage_of(rank, chunk, Direction::backward) < 0) continue;
    if (weights_done_[slot(rank, chunk)] < s_.microbatches)
      return fail(rank, index, "runs before every W pass of chunk " + std::to_string(chunk));
    if (s_.data_parallel && reduced_[slot(rank, chunk)] == kNone)
      return fail(rank, index, "runs before RD" + std::to_string(chunk));
  }
  stepped_[r] = index;
  return Status::success();
}

Status Replay::execute_drop(int rank, int index) {
  const Instruction& in = at(rank, index);
  if (!s_.forward_only)
    return fail(rank, index, "a training schedule's backward needs every stash it keeps");
  SPW_ASSIGN_OR_RETURN(const int stage, compute_stage(rank, index, Direction::forward));
  const std::size_t c = cell(in.mb, stage);
  const std::string mbc = std::to_string(in.mb) + "." + std::to_string(in.chunk);
  if (forward_[c] == kNone) return fail(rank, index, "runs before F" + mbc);
  if (stash_[c] != Stash::resident || holder_[c] != rank)
    return fail(rank, index, "no stash of F" + mbc + " to drop (dropped twice?)");
  // The stash holds the forward's output, which a SendAct still has to read.
  if (stage + 1 < s_.stages() && s_.forward_rank_of(stage + 1) != rank &&
      sent(Payload::activation)[c] == kNone)
    return fail(rank, index, "drops the output of F" + mbc + " before SA" + mbc + " sends it");
  stash_[c] = Stash::freed;
  holder_[c] = kNone;
  count_stashes(rank, -1, -1);
  dropped_[c] = index;
  return Status::success();
}

Status Replay::execute(int rank, int index) {
  SPW_TRY(check_fields(rank, index));
  const Op op = at(rank, index).op;
  if (s_.forward_only && op != Op::forward && op != Op::send_act && op != Op::recv_act &&
      op != Op::drop_stash)
    return fail(rank, index, "an evaluation runs forwards only (F, SA, RA, DS)");
  switch (op) {
    case Op::forward:
      return execute_forward(rank, index);
    case Op::backward_input:
    case Op::backward_weight:
      return execute_backward(rank, index);
    case Op::send_act:
    case Op::recv_act:
    case Op::send_grad:
    case Op::recv_grad:
    case Op::send_stash:
    case Op::recv_stash:
    case Op::send_params:
    case Op::recv_params:
      return execute_transfer(rank, index);
    case Op::offload:
    case Op::prefetch:
      return execute_stash_move(rank, index);
    case Op::reduce_grads:
    case Op::optimizer_step:
      return execute_update(rank, index);
    case Op::drop_stash:
      return execute_drop(rank, index);
  }
  return fail(rank, index, "unknown operation");
}

Status Replay::check_evaluation_complete() const {
  for (int stage = 0; stage < s_.stages(); ++stage) {
    const int rank = s_.forward_rank_of(stage);
    const std::string on = "rank " + std::to_string(rank) + ": ";
    const std::string chunk = std::to_string(s_.chunk_of(stage, Direction::forward));
    for (int mb = 0; mb < s_.microbatches; ++mb) {
      const std::size_t c = cell(mb, stage);
      const std::string mbc = std::to_string(mb) + "." + chunk;
      if (forward_[c] == kNone)
        return error(StatusCode::invalid_argument, on + "F" + mbc + " never runs");
      if (dropped_[c] == kNone)
        return error(StatusCode::invalid_argument,
                     on + "the stash of F" + mbc + " is never dropped (no DS" + mbc + ")");
      const int sent_at = sent(Payload::activation)[c];
      if (sent_at != kNone && received(Payload::activation)[c] == kNone)
        return fail(rank, sent_at, "never received");
    }
  }
  return Status::success();
}

Status Replay::check_complete() const {
  if (s_.forward_only) return check_evaluation_complete();
  const auto never_received = [&](Payload payload, std::size_t k, int sender) -> Status {
    const int at_index = sent(payload)[k];
    if (at_index != kNone && received(payload)[k] == kNone)
      return fail(sender, at_index, "never received");
    return Status::success();
  };
  for (int stage = 0; stage < s_.stages(); ++stage) {
    const int forward_rank = s_.forward_rank_of(stage);
    const int backward_rank = s_.backward_rank_of(stage);
    const std::string fc = std::to_string(s_.chunk_of(stage, Direction::forward));
    const std::string bc = std::to_string(s_.chunk_of(stage, Direction::backward));
    const std::string on_f = "rank " + std::to_string(forward_rank) + ": ";
    const std::string on_b = "rank " + std::to_string(backward_rank) + ": ";
    for (int mb = 0; mb < s_.microbatches; ++mb) {
      const std::size_t c = cell(mb, stage);
      const std::string m = std::to_string(mb) + ".";
      if (forward_[c] == kNone)
        return error(StatusCode::invalid_argument, on_f + "F" + m + fc + " never runs");
      if (input_[c] == kNone)
        return error(StatusCode::invalid_argument, on_b + "B" + m + bc + " never runs");
      if (weight_[c] == kNone)
        return error(StatusCode::invalid_argument, on_b + "W" + m + bc + " never runs");
      SPW_TRY(never_received(Payload::activation, c, forward_rank));
      SPW_TRY(never_received(Payload::gradient, c, backward_rank));
      SPW_TRY(never_received(Payload::stash, c, forward_rank));
    }
    if (forward_rank != backward_rank) {
      const auto k = static_cast<std::size_t>(stage);
      SPW_TRY(never_received(Payload::parameters, k, backward_rank));
      if (received(Payload::parameters)[k] == kNone)
        return error(StatusCode::invalid_argument,
                     on_f + "never receives stage " + std::to_string(stage) +
                         "'s updated parameters (no RP" + fc + "<" +
                         std::to_string(backward_rank) + "), so its forwards would use stale "
                         "weights");
    }
  }
  for (int rank = 0; rank < s_.ranks; ++rank) {
    if (!s_.runs_backward(rank)) continue;
    const std::string on = "rank " + std::to_string(rank) + ": ";
    if (s_.data_parallel)
      for (int chunk = 0; chunk < s_.chunks; ++chunk)
        if (index_.stage_of(rank, chunk, Direction::backward) >= 0 &&
            reduced_[slot(rank, chunk)] == kNone)
          return error(StatusCode::invalid_argument,
                       on + "RD" + std::to_string(chunk) + " never runs");
    if (stepped_[static_cast<std::size_t>(rank)] == kNone)
      return error(StatusCode::invalid_argument, on + "OPT never runs");
  }
  return Status::success();
}

Result<ValidationReport> Replay::run() {
  std::vector<int> next(P_, 0);
  const auto size = [&](int rank) {
    return static_cast<int>(s_.lists[static_cast<std::size_t>(rank)].size());
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int rank = 0; rank < s_.ranks; ++rank) {
      int& pc = next[static_cast<std::size_t>(rank)];
      while (pc < size(rank)) {
        if (is_recv(at(rank, pc).op)) {
          SPW_ASSIGN_OR_RETURN(const bool ready, receivable(rank, pc));
          if (!ready) break;
        }
        SPW_TRY(execute(rank, pc));
        ++pc;
        progress = true;
      }
    }
  }
  std::string stuck;
  for (int rank = 0; rank < s_.ranks; ++rank) {
    const int pc = next[static_cast<std::size_t>(rank)];
    if (pc < size(rank))
      stuck += (stuck.empty() ? "" : "; ") + std::string("rank ") + std::to_string(rank) +
               " waits at [" + std::to_string(pc) + "] " + to_string(at(rank, pc));
  }
  if (!stuck.empty()) return error(StatusCode::invalid_argument, "deadlock: " + stuck);
  SPW_TRY(check_complete());
  return report_;
}

}  // namespace

Result<ValidationReport> validate(const Schedule& schedule) {
  if (schedule.ranks < 1 || schedule.microbatches < 1 || schedule.chunks < 1)
    return error(StatusCode::invalid_argument,
                 "schedule '" + schedule.name +
                     "': needs P, m, v >= 1, got P=" + std::to_string(schedule.ranks) +
                     " m=" + std::to_string(schedule.microbatches) +
                     " v=" + std::to_string(schedule.chunks));
  if (schedule.lists.size() != static_cast<std::size_t>(schedule.ranks))
    return error(StatusCode::invalid_argument,
                 "schedule '" + schedule.name + "': " + std::to_string(schedule.lists.size()) +
                     " lists for " + std::to_string(schedule.ranks) + " ranks");
  SPW_TRY(check_placement(schedule));
  return Replay(schedule).run();
}

}  // namespace spw::sched
