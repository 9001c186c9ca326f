#include "partition/simulator.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>
#include <utility>

#include "partition/slot_memory.hpp"
#include "partition/validator.hpp"

namespace spw::sched {

const char* stream_name(Stream stream) {
  switch (stream) {
    case Stream::compute:
      return "compute";
    case Stream::link:
      return "link";
    case Stream::collective:
      return "collective";
    case Stream::offload:
      return "offload";
  }
  return "unknown";
}

namespace {

constexpr double kNotYet = -1;  // a transfer that has not been sent, a stash not prefetched

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

Status check_value(const std::string& what, double value) {
  if (!std::isfinite(value) || value < 0)
    return error(StatusCode::invalid_argument,
                 "cost model: " + what + " = " + number(value) + " must be >= 0 and finite");
  return Status::success();
}

Status check_link(const std::string& what, const Link& link) {
  // Infinite bandwidth is allowed: it models a transfer that costs only its latency.
  if (std::isnan(link.bandwidth_bytes_per_s) || link.bandwidth_bytes_per_s <= 0)
    return error(StatusCode::invalid_argument,
                 "cost model: " + what + " bandwidth = " + number(link.bandwidth_bytes_per_s) +
                     " must be > 0");
  return check_value(what + " latency", link.latency_s);
}

Status check_costs(const Schedule& schedule, const CostModel& costs) {
  const auto S = static_cast<std::size_t>(schedule.stages());
  if (costs.stages.size() != 1 && costs.stages.size() != S)
    return error(StatusCode::invalid_argument,
                 "cost model: " + std::to_string(costs.stages.size()) + " stage costs for " +
                     std::to_string(S) + " stages (give 1 or " + std::to_string(S) + ")");
  for (std::size_t i = 0; i < costs.stages.size(); ++i) {
    const StageCost& c = costs.stages[i];
    const std::string at = "stage " + std::to_string(i) + " ";
    SPW_TRY(check_value(at + "forward_s", c.forward_s));
    SPW_TRY(check_value(at + "backward_input_s", c.backward_input_s));
    SPW_TRY(check_value(at + "backward_weight_s", c.backward_weight_s));
    SPW_TRY(check_value(at + "reduce_grads_s", c.reduce_grads_s));
    SPW_TRY(check_value(at + "offload_s", c.offload_s));
    SPW_TRY(check_value(at + "prefetch_s", c.prefetch_s));
    for (const auto& [name, bytes] : {std::pair{"activation_bytes", c.activation_bytes},
                                      {"stash_bytes", c.stash_bytes},
                                      {"backward_bytes", c.backward_bytes},
                                      {"workspace_bytes", c.workspace_bytes},
                                      {"scratch_bytes", c.scratch_bytes},
                                      {"parameter_bytes", c.parameter_bytes},
                                      {"gradient_bytes", c.gradient_bytes},
                                      {"optimizer_state_bytes", c.optimizer_state_bytes}})
      if (bytes < 0)
        return error(StatusCode::invalid_argument,
                     "cost model: " + at + name + " = " + std::to_string(bytes) + " must be >= 0");
  }
  SPW_TRY(check_value("optimizer_step_s", costs.optimizer_step_s));
  for (const auto& [name, value] : {std::pair{"receive_lookahead", costs.memory.receive_lookahead},
                                    {"forward_slot_margin", costs.memory.forward_slot_margin}})
    if (value < 0)
      return error(StatusCode::invalid_argument, std::string("cost model: ") + name + " = " +
                                                     std::to_string(value) + " must be >= 0");
  const auto P = static_cast<std::size_t>(schedule.ranks);
  if (costs.links.empty()) return check_link("link", costs.link);
  if (costs.links.size() != P * P)
    return error(StatusCode::invalid_argument,
                 "cost model: " + std::to_string(costs.links.size()) + " links for " +
                     std::to_string(P) + " ranks (give " + std::to_string(P * P) + " or none)");
  for (std::size_t i = 0; i < costs.links.size(); ++i)
    SPW_TRY(
        check_link("link " + std::to_string(i / P) + "->" + std::to_string(i % P), costs.links[i]));
  return Status::success();
}

// Replays a validated schedule in the validator's order, keeping a clock per stream.
class Clock {
 public:
  Clock(const Schedule& schedule, const CostModel& costs)
      : s_(schedule),
        index_(schedule),
        c_(costs),
        P_(static_cast<std::size_t>(schedule.ranks)),
        cells_(static_cast<std::size_t>(schedule.microbatches * schedule.stages())),
        compute_(P_, 0),
        collective_(P_, 0),
        offload_(P_, 0),
        link_free_(P_ * P_, 0),
        stash_ready_(cells_, 0),
        replay_(P_) {
    arrival_.fill(std::vector<double>(cells_, kNotYet));
    done_.fill(std::vector<double>(cells_, kNotYet));
    posted_.fill(std::vector<double>(cells_, kNotYet));
    issued_.fill(std::vector<double>(cells_, kNotYet));
    out_.timeline.resize(P_);
    out_.busy_s.assign(P_, 0);
    for (std::size_t r = 0; r < P_; ++r) {
      const std::size_t n = schedule.lists[r].size();
      for (auto* v : {&replay_[r].reached, &replay_[r].after, &replay_[r].taken})
        v->assign(n, 0);
    }
  }

  Simulation run();

 private:
  const StageCost& cost(int stage) const {
    return c_.stages.size() == 1 ? c_.stages[0] : c_.stages[static_cast<std::size_t>(stage)];
  }
  std::size_t cell(int mb, int stage) const {
    return static_cast<std::size_t>(mb * s_.stages() + stage);
  }
  // As in the validator: by (mb, sending stage), parameters by stage alone.
  std::size_t key(const Transfer& transfer) const {
    return transfer.payload == Payload::parameters
               ? static_cast<std::size_t>(transfer.from_stage)
               : cell(transfer.mb, transfer.from_stage);
  }
  double& arrival(const Transfer& transfer) {
    return arrival_[static_cast<std::size_t>(transfer.payload)][key(transfer)];
  }
  double& done(const Transfer& transfer) {
    return done_[static_cast<std::size_t>(transfer.payload)][key(transfer)];
  }
  double& posted(const Transfer& transfer) {
    return posted_[static_cast<std::size_t>(transfer.payload)][key(transfer)];
  }
  double taken(const Transfer& transfer, int receiver);
  double& issued(const Transfer& transfer) {
    return issued_[static_cast<std::size_t>(transfer.payload)][key(transfer)];
  }
  std::int64_t bytes_of(const Transfer& transfer) const;
  void transfer(int rank, const Instruction& in);
  const Link& link(int from, int to) const {
    return c_.links.empty()
               ? c_.link
               : c_.links[static_cast<std::size_t>(from) * P_ + static_cast<std::size_t>(to)];
  }
  void wait(int rank, double from, double to) {
    if (to > from) replay_[static_cast<std::size_t>(rank)].waits.emplace_back(from, to);
  }
  bool ready(int rank, const Instruction& in) const;
  void step(int rank, const Instruction& in);
  void compute(int rank, const Instruction& in);

  const Schedule& s_;
  const StageIndex index_;
  const CostModel& c_;
  std::size_t P_, cells_;
  std::vector<double> compute_, collective_, offload_, link_free_;
  std::array<std::vector<double>, kPayloads> arrival_;  // [payload][key()]
  // [payload][key()] when the receiver took the data: it reached the receive and the data
  // had arrived.
  // [payload][key()]: when the receiver's compute stream left the receive (the data is in),
  // when the receiver posted it, when it was sent.
  std::array<std::vector<double>, kPayloads> done_, posted_, issued_;
  std::vector<double> stash_ready_;  // by (mb, stage): end of its last prefetch
  std::vector<RankReplay> replay_;   // what the memory replay needs, per rank
  Simulation out_;
};

bool Clock::ready(int rank, const Instruction& in) const {
  if (!is_recv(in.op)) return true;
  // The schedule is validated, so the transfer is well formed.
  const Transfer transfer = *transfer_of(s_, index_, rank, in);
  return arrival_[static_cast<std::size_t>(transfer.payload)][key(transfer)] != kNotYet;
}

std::int64_t Clock::bytes_of(const Transfer& transfer) const {
  switch (transfer.payload) {
    case Payload::activation:
    case Payload::gradient:
      return cost(std::min(transfer.from_stage, transfer.to_stage)).activation_bytes;
    case Payload::stash:
      return cost(transfer.from_stage).stash_bytes;
    case Payload::parameters:
      return cost(transfer.from_stage).parameter_bytes;
  }
  return 0;
}

void Clock::transfer(int rank, const Instruction& in) {
  const auto r = static_cast<std::size_t>(rank);
  const double now = compute_[r];
  const Transfer t = *transfer_of(s_, index_, rank, in);
  double& arrives = arrival(t);
  if (is_send(in.op)) {
    const Link& l = link(rank, in.peer);
    double& free_at = link_free_[r * P_ + static_cast<std::size_t>(in.peer)];
    const double start = std::max(now, free_at);
    arrives = start + l.latency_s + static_cast<double>(bytes_of(t)) / l.bandwidth_bytes_per_s;
    free_at = arrives;
    issued(t) = now;
    out_.timeline[r].push_back({in, start, arrives, Stream::link});
    return;
  }
  compute_[r] = std::max(now, arrives);
  done(t) = compute_[r];
  wait(rank, now, compute_[r]);
  out_.timeline[r].push_back({in, now, compute_[r], Stream::compute});
}

void Clock::compute(int rank, const Instruction& in) {
  const auto r = static_cast<std::size_t>(rank);
  double start = compute_[r];
  double duration = c_.optimizer_step_s;
  if (in.op == Op::optimizer_step) {
    start = std::max(start, collective_[r]);
    wait(rank, compute_[r], start);  // MPI_Waitall on the reduces
  } else {
    const int stage = index_.stage(rank, in.chunk);
    const StageCost& sc = cost(stage);
    if (in.op == Op::forward) {
      duration = sc.forward_s;
    } else {
      duration = in.op == Op::backward_input ? sc.backward_input_s : sc.backward_weight_s;
      start = std::max(start, stash_ready_[cell(in.mb, stage)]);
    }
  }
  compute_[r] = start + duration;
  out_.busy_s[r] += duration;
  out_.timeline[r].push_back({in, start, compute_[r], Stream::compute});
}

void Clock::step(int rank, const Instruction& in) {
  const auto r = static_cast<std::size_t>(rank);
  if (is_compute(in.op) || in.op == Op::optimizer_step) return compute(rank, in);
  const double now = compute_[r];
  if (is_send(in.op) || is_recv(in.op)) return transfer(rank, in);
  if (in.op == Op::drop_stash) {  // frees memory, takes no time
    out_.timeline[r].push_back({in, now, now, Stream::compute});
    return;
  }
  if (in.op == Op::reduce_grads) {
    const double start = std::max(now, collective_[r]);
    collective_[r] = start + cost(index_.stage(rank, in.chunk)).reduce_grads_s;
    out_.timeline[r].push_back({in, start, collective_[r], Stream::collective});
    return;
  }
  // Offload or prefetch.
  const int stage = index_.stage(rank, in.chunk);
  const StageCost& sc = cost(stage);
  const double start = std::max(now, offload_[r]);
  const double end = start + (in.op == Op::offload ? sc.offload_s : sc.prefetch_s);
  offload_[r] = end;
  if (c_.copies_take_compute) compute_[r] = end;
  if (in.op == Op::prefetch) stash_ready_[cell(in.mb, stage)] = end;
  out_.timeline[r].push_back({in, start, end, Stream::offload});
}

// The receiver copies a message inside MPI once it has posted the receive and the data is
// there: at once if it is blocked in some wait then, else when it next blocks or at the
// latest when it reaches that receive.
double Clock::taken(const Transfer& transfer, int receiver) {
  const double from = std::max(arrival(transfer), posted(transfer));
  const double latest = done(transfer);
  const auto& waits = replay_[static_cast<std::size_t>(receiver)].waits;
  const auto wait = std::upper_bound(
      waits.begin(), waits.end(), from,
      [](double t, const std::pair<double, double>& w) { return t < w.second; });
  return wait == waits.end() ? latest : std::min(latest, std::max(from, wait->first));
}

Simulation Clock::run() {
  std::vector<std::size_t> next(P_, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (std::size_t r = 0; r < P_; ++r) {
      const auto& list = s_.lists[r];
      while (next[r] < list.size() && ready(static_cast<int>(r), list[next[r]])) {
        replay_[r].reached[next[r]] = compute_[r];
        step(static_cast<int>(r), list[next[r]]);
        replay_[r].after[next[r]++] = compute_[r];
        progress = true;
      }
    }
  }
  // A receive is posted when the receive `receive_lookahead` before it is reached (the
  // first ones at the start), as the executor does; one posted_when_reached only when
  // reached, and the receives after it not before that.
  const auto lookahead = static_cast<std::size_t>(c_.memory.receive_lookahead);
  for (std::size_t r = 0; r < P_; ++r) {
    std::vector<std::size_t> receives;
    for (std::size_t i = 0; i < s_.lists[r].size(); ++i)
      if (is_recv(s_.lists[r][i].op)) receives.push_back(i);
    double gate = 0;  // when the latest receive posted only when reached was reached
    for (std::size_t k = 0; k < receives.size(); ++k) {
      const Instruction& in = s_.lists[r][receives[k]];
      double at = k < lookahead ? 0 : replay_[r].reached[receives[k - lookahead]];
      if (posted_when_reached(s_.lists[r], receives[k])) gate = replay_[r].reached[receives[k]];
      at = std::max(at, gate);
      posted(*transfer_of(s_, index_, static_cast<int>(r), in)) = at;
    }
  }
  double busy = 0;
  for (std::size_t r = 0; r < P_; ++r) {
    busy += out_.busy_s[r];
    RankReplay& replay = replay_[r];
    for (const TimelineEntry& entry : out_.timeline[r]) {
      out_.iteration_s = std::max(out_.iteration_s, entry.end_s);
      replay.begin.push_back(entry.start_s);
      replay.end.push_back(entry.end_s);
    }
    for (std::size_t i = 0; i < s_.lists[r].size(); ++i) {
      const Instruction& in = s_.lists[r][i];
      if (is_send(in.op))
        replay.taken[i] = taken(*transfer_of(s_, index_, static_cast<int>(r), in), in.peer);
      if (is_recv(in.op))
        replay.receives.emplace_back(replay.after[i],
                                     issued(*transfer_of(s_, index_, static_cast<int>(r), in)));
    }
  }
  SlotMemory memory = replay_slot_memory(s_, c_, replay_);
  out_.peak_memory_bytes = std::move(memory.peak_bytes);
  out_.max_slots = std::move(memory.max_slots);
  if (out_.iteration_s > 0)
    out_.bubble_fraction = 1 - busy / (static_cast<double>(P_) * out_.iteration_s);
  return std::move(out_);
}

}  // namespace

Result<Simulation> simulate(const Schedule& schedule, const CostModel& costs) {
  SPW_ASSIGN_OR_RETURN(ValidationReport report, validate(schedule));
  SPW_TRY(check_costs(schedule, costs));
  Simulation simulation = Clock(schedule, costs).run();
  simulation.max_live_stashes = std::move(report.max_live_stashes);
  return simulation;
}

}  // namespace spw::sched
