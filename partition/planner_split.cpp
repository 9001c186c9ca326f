#include "partition/planner_split.hpp"

#include <functional>

namespace spw::sched {

std::int64_t count_partitions(int blocks, int stages, std::int64_t cap) {
  if (stages < 1 || stages > blocks) return 0;
  // C(n, k) built up as C(n - k + i, i), exact in integers at every step.
  const std::int64_t n = blocks - 1;
  const std::int64_t k = std::min<std::int64_t>(stages - 1, n - (stages - 1));
  std::int64_t c = 1;
  for (std::int64_t i = 1; i <= k; ++i) {
    c = c * (n - k + i) / i;
    if (c > cap) return cap + 1;
  }
  return c;
}

std::vector<std::vector<StageRange>> all_partitions(int blocks, int stages, std::int64_t limit) {
  std::vector<std::vector<StageRange>> out;
  if (stages < 1 || stages > blocks) return out;
  std::vector<StageRange> current;
  const std::function<void(int)> place = [&](int first) {
    if (static_cast<std::int64_t>(out.size()) >= limit) return;
    const int s = static_cast<int>(current.size());
    if (s + 1 == stages) {
      current.push_back({first, blocks - 1});
      out.push_back(current);
      current.pop_back();
      return;
    }
    for (int last = first; last <= blocks - (stages - s); ++last) {
      current.push_back({first, last});
      place(last + 1);
      current.pop_back();
    }
  };
  place(0);
  return out;
}

}  // namespace spw::sched
