#include "partition/validator.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

namespace spw::sched {

namespace {

constexpr int kNone = -1;  // "has not run" in the position tables

enum class Stash : std::uint8_t { none, resident, offloaded, freed };

// Executes the lists in the order described in validator.hpp. Tables indexed by
// (microbatch, stage) hold the list position where something happened, or kNone; transfers
// are indexed by their sending stage.
class Replay {
 public:
  explicit Replay(const Schedule& schedule)
      : s_(schedule),
        P_(static_cast<std::size_t>(schedule.ranks)),
        cells_(static_cast<std::size_t>(schedule.microbatches * schedule.stages())),
        forward_(cells_, kNone),
        input_(cells_, kNone),
        weight_(cells_, kNone),
        act_sent_(cells_, kNone),
        act_received_(cells_, kNone),
        grad_sent_(cells_, kNone),
        grad_received_(cells_, kNone),
        stash_(cells_, Stash::none),
        live_(P_, 0),
        resident_(P_, 0),
        report_{std::vector<int>(P_, 0), std::vector<int>(P_, 0)},
        weights_done_(P_ * static_cast<std::size_t>(schedule.chunks), 0),
        reduced_(P_ * static_cast<std::size_t>(schedule.chunks), kNone),
        stepped_(P_, kNone) {}

  Result<ValidationReport> run();

 private:
  std::size_t cell(int mb, int stage) const {
    return static_cast<std::size_t>(mb * s_.stages() + stage);
  }
  std::size_t slot(int rank, int chunk) const {
    return static_cast<std::size_t>(rank * s_.chunks + chunk);
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
  // Whether the receive at the head of `rank` can complete now; errors for a malformed one.
  Result<bool> receivable(int rank, int index) const;
  Status execute(int rank, int index);
  Status execute_compute(int rank, int index);
  Status execute_transfer(int rank, int index);
  Status execute_stash_move(int rank, int index);
  Status execute_update(int rank, int index);
  Status check_complete() const;
  void count_stashes(int rank, int live_delta, int resident_delta);

  const Schedule& s_;
  std::size_t P_, cells_;
  std::vector<int> forward_, input_, weight_;
  std::vector<int> act_sent_, act_received_, grad_sent_, grad_received_;
  std::vector<Stash> stash_;
  std::vector<int> live_, resident_;
  ValidationReport report_;
  std::vector<int> weights_done_, reduced_;
  std::vector<int> stepped_;
};

Status Replay::check_fields(int rank, int index) const {
  const Instruction& in = at(rank, index);
  const bool uses_mb = in.op != Op::reduce_grads && in.op != Op::optimizer_step;
  const bool uses_chunk = in.op != Op::optimizer_step;
  const bool uses_peer = is_send(in.op) || is_recv(in.op);
  if (uses_chunk && (in.chunk < 0 || in.chunk >= s_.chunks))
    return fail(rank, index, "chunk outside [0, " + std::to_string(s_.chunks) + ")");
  if (uses_mb && (in.mb < 0 || in.mb >= s_.microbatches))
    return fail(rank, index, "microbatch outside [0, " + std::to_string(s_.microbatches) + ")");
  if ((!uses_mb && in.mb != -1) || (!uses_chunk && in.chunk != -1) || (!uses_peer && in.peer != -1))
    return fail(rank, index, "sets a field its operation does not use");
  return Status::success();
}

Result<bool> Replay::receivable(int rank, int index) const {
  SPW_TRY(check_fields(rank, index));
  const Instruction& in = at(rank, index);
  auto transfer = transfer_of(s_, rank, in);
  if (!transfer.ok()) return located(rank, index, transfer.status());
  const std::size_t key = cell(in.mb, transfer->from_stage);
  const auto& received = transfer->gradient ? grad_received_ : act_received_;
  if (received[key] != kNone)
    return fail(rank, index, "received twice (first at [" + std::to_string(received[key]) + "])");
  const auto& sent = transfer->gradient ? grad_sent_ : act_sent_;
  return sent[key] != kNone;
}

void Replay::count_stashes(int rank, int live_delta, int resident_delta) {
  const auto r = static_cast<std::size_t>(rank);
  live_[r] += live_delta;
  resident_[r] += resident_delta;
  report_.max_live_stashes[r] = std::max(report_.max_live_stashes[r], live_[r]);
  report_.max_resident_stashes[r] = std::max(report_.max_resident_stashes[r], resident_[r]);
}

Status Replay::execute_compute(int rank, int index) {
  const Instruction& in = at(rank, index);
  const int stage = s_.stage(rank, in.chunk);
  const std::size_t c = cell(in.mb, stage);
  const std::string mbc = std::to_string(in.mb) + "." + std::to_string(in.chunk);
  auto& done = in.op == Op::forward ? forward_ : in.op == Op::backward_input ? input_ : weight_;
  if (done[c] != kNone)
    return fail(rank, index, "runs twice (first at [" + std::to_string(done[c]) + "])");

  if (in.op == Op::forward) {
    if (stage > 0) {
      const int prev_rank = s_.rank_of(stage - 1);
      if (prev_rank == rank && forward_[cell(in.mb, stage - 1)] == kNone)
        return fail(rank, index,
                    "its input F" + std::to_string(in.mb) + "." +
                        std::to_string(s_.chunk_of(stage - 1)) + " has not run");
      if (prev_rank != rank && act_received_[cell(in.mb, stage - 1)] == kNone)
        return fail(rank, index,
                    "its input has not arrived (no RA" + mbc + "<" + std::to_string(prev_rank) +
                        " before it)");
    }
    stash_[c] = Stash::resident;
    count_stashes(rank, +1, +1);
  } else if (in.op == Op::backward_input) {
    if (forward_[c] == kNone) return fail(rank, index, "runs before F" + mbc);
    if (stash_[c] != Stash::resident)
      return fail(rank, index, "its stash is offloaded (no PF" + mbc + " before it)");
    if (stage + 1 < s_.stages()) {
      const int next_rank = s_.rank_of(stage + 1);
      if (next_rank == rank && input_[cell(in.mb, stage + 1)] == kNone)
        return fail(rank, index,
                    "its output gradient B" + std::to_string(in.mb) + "." +
                        std::to_string(s_.chunk_of(stage + 1)) + " has not run");
      if (next_rank != rank && grad_received_[cell(in.mb, stage + 1)] == kNone)
        return fail(rank, index,
                    "its output gradient has not arrived (no RG" + mbc + "<" +
                        std::to_string(next_rank) + " before it)");
    }
  } else {
    if (input_[c] == kNone) return fail(rank, index, "runs before B" + mbc);
    if (stash_[c] != Stash::resident)
      return fail(rank, index, "its stash is offloaded (no PF" + mbc + " before it)");
    stash_[c] = Stash::freed;
    count_stashes(rank, -1, -1);
    ++weights_done_[slot(rank, in.chunk)];
  }
  done[c] = index;
  return Status::success();
}

Status Replay::execute_transfer(int rank, int index) {
  const Instruction& in = at(rank, index);
  auto transfer = transfer_of(s_, rank, in);
  if (!transfer.ok()) return located(rank, index, transfer.status());
  const std::size_t key = cell(in.mb, transfer->from_stage);
  if (is_recv(in.op)) {
    (transfer->gradient ? grad_received_ : act_received_)[key] = index;
    return Status::success();
  }
  const std::string mbc = std::to_string(in.mb) + "." + std::to_string(in.chunk);
  const auto& producer = transfer->gradient ? input_ : forward_;
  if (producer[key] == kNone)
    return fail(rank, index,
                std::string("sends before ") + (transfer->gradient ? "B" : "F") + mbc +
                    " produced the data");
  auto& sent = transfer->gradient ? grad_sent_ : act_sent_;
  if (sent[key] != kNone)
    return fail(rank, index, "sent twice (first at [" + std::to_string(sent[key]) + "])");
  sent[key] = index;
  return Status::success();
}

Status Replay::execute_stash_move(int rank, int index) {
  const Instruction& in = at(rank, index);
  Stash& stash = stash_[cell(in.mb, s_.stage(rank, in.chunk))];
  if (in.op == Op::offload) {
    if (stash != Stash::resident)
      return fail(rank, index, "no resident stash to offload (not forwarded, offloaded or freed)");
    stash = Stash::offloaded;
    count_stashes(rank, 0, -1);
  } else {
    if (stash != Stash::offloaded) return fail(rank, index, "no offloaded stash to prefetch");
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
  if (stepped_[r] != kNone)
    return fail(rank, index, "runs twice (first at [" + std::to_string(stepped_[r]) + "])");
  if (static_cast<std::size_t>(index) + 1 != s_.lists[r].size())
    return fail(rank, index, "is not the last instruction of the rank");
  for (int chunk = 0; chunk < s_.chunks; ++chunk) {
    if (weights_done_[slot(rank, chunk)] < s_.microbatches)
      return fail(rank, index, "runs before every W pass of chunk " + std::to_string(chunk));
    if (s_.data_parallel && reduced_[slot(rank, chunk)] == kNone)
      return fail(rank, index, "runs before RD" + std::to_string(chunk));
  }
  stepped_[r] = index;
  return Status::success();
}

Status Replay::execute(int rank, int index) {
  SPW_TRY(check_fields(rank, index));
  const Op op = at(rank, index).op;
  if (is_compute(op)) return execute_compute(rank, index);
  if (is_send(op) || is_recv(op)) return execute_transfer(rank, index);
  if (op == Op::offload || op == Op::prefetch) return execute_stash_move(rank, index);
  return execute_update(rank, index);
}

Status Replay::check_complete() const {
  for (int stage = 0; stage < s_.stages(); ++stage) {
    const int rank = s_.rank_of(stage);
    const std::string on = "rank " + std::to_string(rank) + ": ";
    for (int mb = 0; mb < s_.microbatches; ++mb) {
      const std::size_t c = cell(mb, stage);
      const std::string mbc = std::to_string(mb) + "." + std::to_string(s_.chunk_of(stage));
      if (forward_[c] == kNone)
        return error(StatusCode::invalid_argument, on + "F" + mbc + " never runs");
      if (input_[c] == kNone)
        return error(StatusCode::invalid_argument, on + "B" + mbc + " never runs");
      if (weight_[c] == kNone)
        return error(StatusCode::invalid_argument, on + "W" + mbc + " never runs");
      if (act_sent_[c] != kNone && act_received_[c] == kNone)
        return fail(rank, act_sent_[c], "never received");
      if (grad_sent_[c] != kNone && grad_received_[c] == kNone)
        return fail(rank, grad_sent_[c], "never received");
    }
  }
  for (int rank = 0; rank < s_.ranks; ++rank) {
    const std::string on = "rank " + std::to_string(rank) + ": ";
    if (s_.data_parallel)
      for (int chunk = 0; chunk < s_.chunks; ++chunk)
        if (reduced_[slot(rank, chunk)] == kNone)
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
  return Replay(schedule).run();
}

}  // namespace spw::sched
