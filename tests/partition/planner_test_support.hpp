// Topologies and blocks the planner tests share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "partition/profile.hpp"
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

// A block whose three passes take `each_pass_s`, with parameters large enough (1 GiB) that
// on slow links replicas' all-reduce loses to a pipeline.
inline BlockProfile uniform_block(const std::string& name, double each_pass_s) {
  BlockProfile b;
  b.name = name;
  b.forward_s = b.backward_input_s = b.backward_weight_s = each_pass_s;
  b.activation_bytes = 1 << 10;
  b.stash_bytes = 4 << 10;
  b.parameter_bytes = b.gradient_bytes = std::int64_t{1} << 30;
  return b;
}

}  // namespace spw::sched
