#include "partition/offload_pass.hpp"

#include <algorithm>
#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "partition/validator.hpp"

namespace spw::sched {

namespace {

// Where one stash's passes sit among the rank's anchors: its compute instructions plus the
// receives that bring a stash in (PipeFB's RecvStash). On a classic schedule the anchors
// are exactly the compute instructions.
struct StashPasses {
  int arrival = -1, input = -1, weight = -1;  // anchor indices of F or RecvStash, B, W
};

bool is_anchor(Op op) { return is_compute(op) || op == Op::recv_stash; }

// The rank's list with Offload / Prefetch instructions added after anchors.
std::vector<Instruction> rewrite_rank(const Schedule& schedule, int rank,
                                      const OffloadPolicy& policy) {
  const std::vector<Instruction>& list = schedule.lists[static_cast<std::size_t>(rank)];
  std::vector<int> arrival_at;  // anchor indices of the rank's stash arrivals, ascending
  std::map<std::pair<int, int>, StashPasses> stashes;  // (mb, chunk)
  int count = 0;
  for (const Instruction& in : list) {
    if (!is_anchor(in.op)) continue;
    if (is_stash_arrival(schedule, rank, in)) {
      stashes[{in.mb, in.chunk}].arrival = count;
      arrival_at.push_back(count);
    } else if (in.op == Op::backward_input) {
      stashes[{in.mb, in.chunk}].input = count;
    } else if (in.op == Op::backward_weight) {
      stashes[{in.mb, in.chunk}].weight = count;
    }
    ++count;
  }

  // after[k]: what goes directly after anchor k, in order. An Offload is placed first (its
  // arrival is k), then prefetches by how soon their B runs.
  std::vector<std::vector<std::pair<int, Instruction>>> after(static_cast<std::size_t>(count));
  for (const auto& [key, passes] : stashes) {
    // A forward-only rank's stash leaves with SendStash: nothing to offload here.
    if (passes.arrival < 0 || passes.input < 0 || passes.weight < 0) continue;
    const auto arrivals_between =
        std::lower_bound(arrival_at.begin(), arrival_at.end(), passes.weight) -
        std::upper_bound(arrival_at.begin(), arrival_at.end(), passes.arrival);
    if (arrivals_between < policy.keep) continue;
    const auto [mb, chunk] = key;
    after[static_cast<std::size_t>(passes.arrival)].emplace_back(
        -1, Instruction::offload(mb, chunk));
    const int at = std::max(passes.input - policy.lookahead - 1, passes.arrival);
    after[static_cast<std::size_t>(at)].emplace_back(passes.input,
                                                     Instruction::prefetch(mb, chunk));
  }

  std::vector<Instruction> out;
  out.reserve(list.size() + 2 * stashes.size());
  int k = 0;
  for (const Instruction& in : list) {
    out.push_back(in);
    if (!is_anchor(in.op)) continue;
    auto& extra = after[static_cast<std::size_t>(k++)];
    std::stable_sort(extra.begin(), extra.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [order, instruction] : extra) out.push_back(instruction);
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

  Schedule out = schedule;
  for (std::size_t r = 0; r < out.lists.size(); ++r) {
    out.lists[r] = rewrite_rank(schedule, static_cast<int>(r), policy);
  }
  auto checked = validate(out);
  if (!checked.ok())
    return error(StatusCode::internal,
                 what + " made an invalid schedule (a bug): " + checked.status().message());
  return out;
}

}  // namespace spw::sched
