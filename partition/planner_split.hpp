// Contiguous partitions of blocks into stages: all of them (for exhaustive search on small
// models) and the one minimising the largest stage cost (for large ones).
//
// min_max_partition is exact for any stage cost and memory test that are monotone in the
// range: cost(stage, a, b) and "does not fit" never decrease when b grows or a shrinks.
// For a threshold T, filling each stage greedily as far as it stays within T (and leaves a
// block for every later stage) succeeds whenever any partition within T exists: by
// induction the greedy stage ends no earlier than that partition's, and cutting a feasible
// range on the left keeps it feasible. Bisection on T then costs
// O(iterations * S * log n) with a binary search for each stage's end.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "partition/planner_cost.hpp"

namespace spw::sched {

// C(blocks - 1, stages - 1), or `cap` + 1 when it exceeds cap.
std::int64_t count_partitions(int blocks, int stages, std::int64_t cap);

// Every partition of `blocks` into `stages` non-empty ranges, in lexicographic order of the
// stage ends; at most `limit` of them.
std::vector<std::vector<StageRange>> all_partitions(int blocks, int stages, std::int64_t limit);

// Empty when no partition fits. `cost(stage, first, last)` -> double,
// `fits(stage, first, last)` -> bool.
template <class Cost, class Fits>
std::vector<StageRange> min_max_partition(int blocks, int stages, const Cost& cost,
                                          const Fits& fits, int iterations = 48) {
  if (stages < 1 || stages > blocks) return {};
  const auto within = [&](int s, int a, int b, double limit) {
    return fits(s, a, b) && cost(s, a, b) <= limit;
  };
  const auto greedy = [&](double limit) {
    std::vector<StageRange> out;
    int a = 0;
    for (int s = 0; s < stages; ++s) {
      const int most = s + 1 == stages ? blocks - 1 : blocks - (stages - s);
      if (s + 1 == stages) {
        if (!within(s, a, most, limit)) return std::vector<StageRange>{};
        out.push_back({a, most});
        break;
      }
      if (!within(s, a, a, limit)) return std::vector<StageRange>{};
      int lo = a, hi = most;  // lo fits, find the last b that does
      while (lo < hi) {
        const int mid = lo + (hi - lo + 1) / 2;
        if (within(s, a, mid, limit)) lo = mid; else hi = mid - 1;
      }
      out.push_back({a, lo});
      a = lo + 1;
    }
    return out;
  };
  std::vector<StageRange> best = greedy(std::numeric_limits<double>::infinity());
  if (best.empty()) return best;
  double hi = 0;
  for (int s = 0; s < stages; ++s) {
    const auto i = static_cast<std::size_t>(s);
    hi = std::max(hi, cost(s, best[i].first, best[i].last));
  }
  double lo = 0;
  for (int i = 0; i < iterations && hi - lo > 1e-12 * hi; ++i) {
    const double mid = lo + (hi - lo) / 2;
    std::vector<StageRange> found = greedy(mid);
    if (found.empty()) {
      lo = mid;
    } else {
      hi = mid;
      best = std::move(found);
    }
  }
  return best;
}

}  // namespace spw::sched
