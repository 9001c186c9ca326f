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

// Where one stash's passes sit among the rank's compute instructions.
struct StashPasses {
  int forward = -1, input = -1, weight = -1;  // compute indices of F, B, W
};

// The rank's list with Offload / Prefetch instructions added after compute instructions.
std::vector<Instruction> rewrite_rank(const std::vector<Instruction>& list,
                                      const OffloadPolicy& policy) {
  std::vector<int> forward_at;  // compute indices of the rank's forwards, ascending
  std::map<std::pair<int, int>, StashPasses> stashes;  // (mb, chunk)
  int count = 0;
  for (const Instruction& in : list) {
    if (!is_compute(in.op)) continue;
    StashPasses& passes = stashes[{in.mb, in.chunk}];
    if (in.op == Op::forward) {
      passes.forward = count;
      forward_at.push_back(count);
    } else if (in.op == Op::backward_input) {
      passes.input = count;
    } else {
      passes.weight = count;
    }
    ++count;
  }

  // after[k]: what goes directly after compute instruction k, in order. An Offload is
  // placed first (its Forward is k), then prefetches by how soon their B runs.
  std::vector<std::vector<std::pair<int, Instruction>>> after(static_cast<std::size_t>(count));
  for (const auto& [key, passes] : stashes) {
    const auto forwards_between =
        std::lower_bound(forward_at.begin(), forward_at.end(), passes.weight) -
        std::upper_bound(forward_at.begin(), forward_at.end(), passes.forward);
    if (forwards_between < policy.keep) continue;
    const auto [mb, chunk] = key;
    after[static_cast<std::size_t>(passes.forward)].emplace_back(
        -1, Instruction::offload(mb, chunk));
    const int at = std::max(passes.input - policy.lookahead - 1, passes.forward);
    after[static_cast<std::size_t>(at)].emplace_back(passes.input,
                                                     Instruction::prefetch(mb, chunk));
  }

  std::vector<Instruction> out;
  out.reserve(list.size() + 2 * stashes.size());
  int k = 0;
  for (const Instruction& in : list) {
    out.push_back(in);
    if (!is_compute(in.op)) continue;
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
  for (auto& list : out.lists) list = rewrite_rank(list, policy);
  auto checked = validate(out);
  if (!checked.ok())
    return error(StatusCode::internal,
                 what + " made an invalid schedule (a bug): " + checked.status().message());
  return out;
}

}  // namespace spw::sched
