// Topologies the planner tests share.
#pragma once

#include <cstddef>
#include <utility>

#include "partition/rank_topology.hpp"

namespace spw::sched {

// Two nodes of two ranks (`intra` inside a node, `inter` between them) where ranks `a` and
// `b` trade nodes, so the identity mapping of ranks is the wrong one.
inline RankTopology two_nodes_with_ranks_swapped(int a, int b, Link intra, Link inter) {
  RankTopology t = *synthetic_topology(2, 2, intra, inter);
  std::swap(t.node_of[static_cast<std::size_t>(a)], t.node_of[static_cast<std::size_t>(b)]);
  for (int from = 0; from < 4; ++from)
    for (int to = 0; to < 4; ++to)
      if (from != to)
        t.links[static_cast<std::size_t>(from * 4 + to)] =
            t.node_of[static_cast<std::size_t>(from)] == t.node_of[static_cast<std::size_t>(to)]
                ? intra
                : inter;
  return t;
}

}  // namespace spw::sched
