#include "partition/offload_pass.hpp"

#include <algorithm>
#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "partition/simulator.hpp"
#include "partition/validator.hpp"

namespace spw::sched {

namespace {

// Where one stash's instructions sit in the rank's list (positions), and its B among the
// rank's compute instructions (F, B, W). A stash counts on this rank only if it arrives
// here (is_stash_arrival): its F when the rank also runs the stage's backwards, else its
// RecvStash; a forward-only rank's stash leaves with SendStash and is never offloaded.
struct StashPasses {
  int arrival = -1, input = -1, weight = -1;  // list positions of F or RS, B, W
  int input_compute = -1;                     // compute index of B
};

struct RankStashes {
  std::vector<int> compute_at;                         // [compute index] -> list position
  std::vector<int> arrivals;                           // list positions, ascending
  std::map<std::pair<int, int>, StashPasses> stashes;  // (mb, chunk)

  // Other stashes arriving on the rank while this one waits for its W.
  int arrivals_between(const StashPasses& p) const {
    return static_cast<int>(std::lower_bound(arrivals.begin(), arrivals.end(), p.weight) -
                            std::upper_bound(arrivals.begin(), arrivals.end(), p.arrival));
  }
};

RankStashes find_stashes(const Schedule& schedule, int rank) {
  const auto& list = schedule.lists[static_cast<std::size_t>(rank)];
  RankStashes out;
  for (int i = 0; i < static_cast<int>(list.size()); ++i) {
    const Instruction& in = list[static_cast<std::size_t>(i)];
    if (is_stash_arrival(schedule, rank, in)) {
      out.stashes[{in.mb, in.chunk}].arrival = i;
      out.arrivals.push_back(i);
    }
    if (!is_compute(in.op)) continue;
    if (in.op == Op::backward_input) {
      StashPasses& p = out.stashes[{in.mb, in.chunk}];
      p.input = i;
      p.input_compute = static_cast<int>(out.compute_at.size());
    } else if (in.op == Op::backward_weight) {
      out.stashes[{in.mb, in.chunk}].weight = i;
    }
    out.compute_at.push_back(i);
  }
  // Forwards of a forward-only chunk made no entry with an arrival: not this rank's stashes.
  std::erase_if(out.stashes, [](const auto& entry) { return entry.second.arrival < 0; });
  return out;
}

// The rank's list with Offload / Prefetch instructions added.
std::vector<Instruction> rewrite_rank(const Schedule& schedule, int rank,
                                      const OffloadPolicy& policy) {
  const auto& list = schedule.lists[static_cast<std::size_t>(rank)];
  const RankStashes found = find_stashes(schedule, rank);

  // after[i]: what goes directly after list position i, in order. An Offload is placed
  // first (its stash arrived at i), then prefetches by how soon their B runs.
  std::vector<std::vector<std::pair<int, Instruction>>> after(list.size());
  for (const auto& [key, passes] : found.stashes) {
    if (found.arrivals_between(passes) < policy.keep) continue;
    const auto [mb, chunk] = key;
    after[static_cast<std::size_t>(passes.arrival)].emplace_back(-1,
                                                                 Instruction::offload(mb, chunk));
    const int ahead = passes.input_compute - policy.lookahead - 1;
    const int at =
        ahead < 0 ? passes.arrival
                  : std::max(found.compute_at[static_cast<std::size_t>(ahead)], passes.arrival);
    after[static_cast<std::size_t>(at)].emplace_back(passes.input,
                                                     Instruction::prefetch(mb, chunk));
  }

  std::vector<Instruction> out;
  out.reserve(list.size() + 2 * found.stashes.size());
  for (std::size_t i = 0; i < list.size(); ++i) {
    out.push_back(list[i]);
    auto& extra = after[i];
    std::stable_sort(extra.begin(), extra.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [order, instruction] : extra) out.push_back(instruction);
  }
  return out;
}

// Moves each RecvStash up to where its stash has arrived on a unit-cost timeline (see the
// header). Forward ranks never wait on backward ranks within an iteration, so receiving
// earlier cannot deadlock; the caller validates the result all the same.
Result<Schedule> receive_stashes_on_arrival(const Schedule& schedule) {
  const auto receives_stash = [](const std::vector<Instruction>& list) {
    return std::any_of(list.begin(), list.end(),
                       [](const Instruction& in) { return in.op == Op::recv_stash; });
  };
  if (std::none_of(schedule.lists.begin(), schedule.lists.end(), receives_stash))
    return schedule;

  CostModel unit;
  unit.stages.push_back(StageCost{});
  unit.stages[0].forward_s = unit.stages[0].backward_input_s = unit.stages[0].backward_weight_s = 1;
  SPW_ASSIGN_OR_RETURN(const Simulation timed, simulate(schedule, unit));

  const StageIndex index(schedule);
  std::map<std::pair<int, int>, double> arrival;  // (stage, mb) -> when its stash is there
  for (int rank = 0; rank < schedule.ranks; ++rank) {
    for (const TimelineEntry& entry : timed.timeline[static_cast<std::size_t>(rank)]) {
      const Instruction& in = entry.instruction;
      if (in.op != Op::send_stash) continue;
      arrival[{index.stage_of(rank, in.chunk, Direction::forward), in.mb}] = entry.end_s;
    }
  }

  Schedule out = schedule;
  for (int rank = 0; rank < schedule.ranks; ++rank) {
    const auto& list = schedule.lists[static_cast<std::size_t>(rank)];
    const auto& times = timed.timeline[static_cast<std::size_t>(rank)];
    if (!receives_stash(list)) continue;
    // before[i]: the receives that now go directly before list position i.
    std::vector<std::vector<Instruction>> before(list.size() + 1);
    int floor = 0;  // receives keep their order
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      const Instruction& in = list[static_cast<std::size_t>(i)];
      if (in.op != Op::recv_stash) continue;
      const double arrives =
          arrival.at({index.stage_of(rank, in.chunk, Direction::backward), in.mb});
      // After the last compute that starts before the stash is there and the sends that
      // follow it (they belong to that compute), before anything else.
      int at = 0;
      for (int j = 0; j < i; ++j) {
        const Instruction& prior = list[static_cast<std::size_t>(j)];
        if (is_compute(prior.op) && times[static_cast<std::size_t>(j)].start_s < arrives)
          at = j + 1;
      }
      while (at < i && is_send(list[static_cast<std::size_t>(at)].op)) ++at;
      at = std::max(at, floor);
      floor = at;
      before[static_cast<std::size_t>(at)].push_back(in);
    }
    std::vector<Instruction> moved;
    moved.reserve(list.size());
    for (std::size_t i = 0; i <= list.size(); ++i) {
      for (const Instruction& in : before[i]) moved.push_back(in);
      if (i < list.size() && list[i].op != Op::recv_stash) moved.push_back(list[i]);
    }
    out.lists[static_cast<std::size_t>(rank)] = std::move(moved);
  }
  return out;
}

}  // namespace

Result<Schedule> insert_offload(const Schedule& schedule, const OffloadPolicy& policy) {
  const std::string what = "offload pass on schedule '" + schedule.name + "'";
  if (policy.keep < 0 || policy.lookahead < 0)
    return error(StatusCode::invalid_argument,
                 what + ": keep and lookahead must be >= 0, got keep=" +
                     std::to_string(policy.keep) +
                     " lookahead=" + std::to_string(policy.lookahead));
  auto input = validate(schedule);
  if (!input.ok()) return input.status().with_context(what);
  for (const auto& list : schedule.lists)
    for (const Instruction& in : list)
      if (in.op == Op::offload || in.op == Op::prefetch)
        return error(StatusCode::invalid_argument,
                     what + ": it already holds " + to_string(in) +
                         "; run the pass on a schedule without offload instructions");

  auto received = receive_stashes_on_arrival(schedule);
  if (!received.ok()) return received.status().with_context(what);
  Schedule out = *received;
  bool offloads = false;
  for (int rank = 0; rank < out.ranks; ++rank) {
    auto& list = out.lists[static_cast<std::size_t>(rank)];
    list = rewrite_rank(*received, rank, policy);
    offloads = offloads || std::any_of(list.begin(), list.end(), [](const Instruction& in) {
                 return in.op == Op::offload;
               });
  }
  // Receiving early only serves offload: a policy that offloads nothing changes nothing.
  if (!offloads) return schedule;
  auto checked = validate(out);
  if (!checked.ok())
    return error(StatusCode::internal,
                 what + " made an invalid schedule (a bug): " + checked.status().message());
  return out;
}

int offload_keep_limit(const Schedule& schedule) {
  // The pass counts arrivals where it moves the receives to.
  auto received = receive_stashes_on_arrival(schedule);
  const Schedule& counted = received.ok() ? *received : schedule;
  int limit = 0;
  for (int rank = 0; rank < counted.ranks; ++rank) {
    const RankStashes found = find_stashes(counted, rank);
    for (const auto& entry : found.stashes)
      limit = std::max(limit, found.arrivals_between(entry.second) + 1);
  }
  return limit;
}

}  // namespace spw::sched
