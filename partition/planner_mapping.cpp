#include "partition/planner_mapping.hpp"

#include <cstddef>

namespace spw::sched {

std::vector<int> bandwidth_chain(const RankTopology& t) {
  const auto n = static_cast<std::size_t>(t.ranks);
  std::vector<int> chain{0};
  std::vector<bool> used(n, false);
  used[0] = true;
  while (chain.size() < n) {
    const int at = chain.back();
    int best = -1;
    for (int to = 0; to < t.ranks; ++to) {
      if (used[static_cast<std::size_t>(to)]) continue;
      if (best < 0) {
        best = to;
        continue;
      }
      const Link& a = t.link(at, to);
      const Link& b = t.link(at, best);
      // Faster first; at equal bandwidth the shorter latency; then the lower rank.
      if (a.bandwidth_bytes_per_s > b.bandwidth_bytes_per_s ||
          (a.bandwidth_bytes_per_s == b.bandwidth_bytes_per_s && a.latency_s < b.latency_s))
        best = to;
    }
    used[static_cast<std::size_t>(best)] = true;
    chain.push_back(best);
  }
  return chain;
}

std::vector<int> replicas_along_chain(const std::vector<int>& chain, int pipeline_ranks) {
  const int R = static_cast<int>(chain.size()) / pipeline_ranks;
  std::vector<int> world(chain.size());
  for (int j = 0; j < R; ++j)
    for (int p = 0; p < pipeline_ranks; ++p)
      world[static_cast<std::size_t>(j * pipeline_ranks + p)] =
          chain[static_cast<std::size_t>(p * R + j)];
  return world;
}

std::vector<int> pair_stage_ranks(const std::vector<int>& world, int stages) {
  std::vector<int> out(world.size());
  const std::size_t n = 2 * static_cast<std::size_t>(stages);
  for (std::size_t base = 0; base + n <= world.size(); base += n)
    for (std::size_t s = 0; s < static_cast<std::size_t>(stages); ++s) {
      out[base + s] = world[base + 2 * s];
      out[base + static_cast<std::size_t>(stages) + s] = world[base + 2 * s + 1];
    }
  return out;
}

}  // namespace spw::sched
