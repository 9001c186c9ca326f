#include "partition/simulator.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>
#include <utility>

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
                                      {"parameter_bytes", c.parameter_bytes},
                                      {"gradient_bytes", c.gradient_bytes},
                                      {"optimizer_state_bytes", c.optimizer_state_bytes}})
      if (bytes < 0)
        return error(StatusCode::invalid_argument,
                     "cost model: " + at + name + " = " + std::to_string(bytes) + " must be >= 0");
  }
  SPW_TRY(check_value("optimizer_step_s", costs.optimizer_step_s));
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
        c_(costs),
        P_(static_cast<std::size_t>(schedule.ranks)),
        cells_(static_cast<std::size_t>(schedule.microbatches * schedule.stages())),
        compute_(P_, 0),
        collective_(P_, 0),
        offload_(P_, 0),
        link_free_(P_ * P_, 0),
        act_held_(cells_, 0),
        grad_held_(cells_, 0),
        stash_ready_(cells_, 0),
        events_(P_) {
    arrival_.fill(std::vector<double>(cells_, kNotYet));
    out_.timeline.resize(P_);
    out_.busy_s.assign(P_, 0);
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
  std::int64_t bytes_of(const Transfer& transfer) const;
  void transfer(int rank, const Instruction& in);
  const Link& link(int from, int to) const {
    return c_.links.empty()
               ? c_.link
               : c_.links[static_cast<std::size_t>(from) * P_ + static_cast<std::size_t>(to)];
  }
  void memory(int rank, double at, std::int64_t delta) {
    if (delta != 0) events_[static_cast<std::size_t>(rank)].emplace_back(at, delta);
  }
  bool ready(int rank, const Instruction& in) const;
  void step(int rank, const Instruction& in);
  void compute(int rank, const Instruction& in);
  std::int64_t peak_memory(int rank);

  const Schedule& s_;
  const CostModel& c_;
  std::size_t P_, cells_;
  std::vector<double> compute_, collective_, offload_, link_free_;
  std::array<std::vector<double>, kPayloads> arrival_;  // [payload][key()]
  std::vector<std::int64_t> act_held_, grad_held_;  // received bytes, by (mb, receiving stage)
  std::vector<double> stash_ready_;                 // by (mb, stage): end of its last prefetch
  std::vector<std::vector<std::pair<double, std::int64_t>>> events_;  // memory, per rank
  Simulation out_;
};

bool Clock::ready(int rank, const Instruction& in) const {
  if (!is_recv(in.op)) return true;
  // The schedule is validated, so the transfer is well formed.
  const Transfer transfer = *transfer_of(s_, rank, in);
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

// Activations and gradients use transfer buffers: a send holds its bytes from issue to
// arrival, a receive from when it is reached until the F or B consuming it ends. A stash
// is its own buffer: the forward rank frees it when the transfer arrives, the backward
// rank holds it from the RecvStash until W ends. Parameters move in place, from the
// backward rank's updated tensors into the forward rank's (its forwards are done by then).
void Clock::transfer(int rank, const Instruction& in) {
  const auto r = static_cast<std::size_t>(rank);
  const double now = compute_[r];
  const Transfer t = *transfer_of(s_, rank, in);
  const std::int64_t bytes = bytes_of(t);
  const bool buffered = t.payload == Payload::activation || t.payload == Payload::gradient;
  double& arrives = arrival(t);
  if (is_send(in.op)) {
    const Link& l = link(rank, in.peer);
    double& free_at = link_free_[r * P_ + static_cast<std::size_t>(in.peer)];
    const double start = std::max(now, free_at);
    arrives = start + l.latency_s + static_cast<double>(bytes) / l.bandwidth_bytes_per_s;
    free_at = arrives;
    if (buffered) memory(rank, now, bytes);
    if (buffered || t.payload == Payload::stash) memory(rank, arrives, -bytes);
    out_.timeline[r].push_back({in, start, arrives, Stream::link});
    return;
  }
  if (buffered)
    (t.payload == Payload::gradient ? grad_held_ : act_held_)[cell(in.mb, t.to_stage)] = bytes;
  if (buffered || t.payload == Payload::stash) memory(rank, now, bytes);
  compute_[r] = std::max(now, arrives);
  out_.timeline[r].push_back({in, now, compute_[r], Stream::compute});
}

void Clock::compute(int rank, const Instruction& in) {
  const auto r = static_cast<std::size_t>(rank);
  double start = compute_[r];
  double duration = c_.optimizer_step_s;
  if (in.op == Op::optimizer_step) {
    start = std::max(start, collective_[r]);
  } else {
    const int stage = s_.stage(rank, in.chunk);
    const std::size_t at = cell(in.mb, stage);
    const StageCost& sc = cost(stage);
    if (in.op == Op::forward) {
      duration = sc.forward_s;
      memory(rank, start, sc.stash_bytes);
    } else {
      duration = in.op == Op::backward_input ? sc.backward_input_s : sc.backward_weight_s;
      start = std::max(start, stash_ready_[at]);
    }
    const double finish = start + duration;
    if (in.op == Op::backward_weight) memory(rank, finish, -sc.stash_bytes);
    // The F or B consuming a received buffer releases it.
    if (in.op != Op::backward_weight) {
      std::int64_t& held = (in.op == Op::forward ? act_held_ : grad_held_)[at];
      memory(rank, finish, -held);
      held = 0;
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
  if (in.op == Op::reduce_grads) {
    const double start = std::max(now, collective_[r]);
    collective_[r] = start + cost(s_.stage(rank, in.chunk)).reduce_grads_s;
    out_.timeline[r].push_back({in, start, collective_[r], Stream::collective});
    return;
  }
  // Offload or prefetch.
  const int stage = s_.stage(rank, in.chunk);
  const StageCost& sc = cost(stage);
  const double start = std::max(now, offload_[r]);
  const double end = start + (in.op == Op::offload ? sc.offload_s : sc.prefetch_s);
  offload_[r] = end;
  if (in.op == Op::offload) {
    memory(rank, end, -sc.stash_bytes);
  } else {
    memory(rank, start, sc.stash_bytes);
    stash_ready_[cell(in.mb, stage)] = end;
  }
  out_.timeline[r].push_back({in, start, end, Stream::offload});
}

std::int64_t Clock::peak_memory(int rank) {
  // Only the rank running a stage's backwards holds its gradients and optimizer state.
  std::int64_t level = 0;
  for (int chunk = 0; chunk < s_.chunks_on(rank); ++chunk) {
    const int stage = s_.stage(rank, chunk);
    const StageCost& sc = cost(stage);
    level += sc.parameter_bytes;
    if (s_.backward_rank_of(stage) == rank) level += sc.gradient_bytes + sc.optimizer_state_bytes;
  }
  auto& events = events_[static_cast<std::size_t>(rank)];
  // Frees sort before allocations at the same instant.
  std::sort(events.begin(), events.end());
  std::int64_t peak = level;
  for (const auto& [at, delta] : events) peak = std::max(peak, level += delta);
  return peak;
}

Simulation Clock::run() {
  std::vector<std::size_t> next(P_, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (std::size_t r = 0; r < P_; ++r) {
      const auto& list = s_.lists[r];
      while (next[r] < list.size() && ready(static_cast<int>(r), list[next[r]])) {
        step(static_cast<int>(r), list[next[r]++]);
        progress = true;
      }
    }
  }
  double busy = 0;
  for (std::size_t r = 0; r < P_; ++r) {
    busy += out_.busy_s[r];
    for (const TimelineEntry& entry : out_.timeline[r])
      out_.iteration_s = std::max(out_.iteration_s, entry.end_s);
    out_.peak_memory_bytes.push_back(peak_memory(static_cast<int>(r)));
  }
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
