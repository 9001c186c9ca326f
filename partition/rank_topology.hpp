// The ranks a job runs on as the planner sees them: which node each rank sits on and, for
// every ordered pair, the bandwidth and latency of a message between them. Connectivity is
// arbitrary (a full matrix), so a fat tree, a torus or a measured matrix all fit; the
// synthetic constructor covers the common "N nodes of r ranks" case. (kernels/topology is
// something else: the cores and NUMA domains inside one node.)
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kernels/status.hpp"
#include "partition/simulator.hpp"

namespace spw::sched {

struct RankTopology {
  int ranks = 0;
  std::vector<int> node_of;  // [rank]
  std::vector<Link> links;   // [from * ranks + to]; the diagonal is free and never used

  const Link& link(int from, int to) const {
    return links[static_cast<std::size_t>(from) * static_cast<std::size_t>(ranks) +
                 static_cast<std::size_t>(to)];
  }
};

// invalid_argument naming the value: ranks < 1, node_of or links of the wrong length, a
// negative node, an off-diagonal bandwidth that is not a positive finite number, a latency
// that is negative or not finite.
Status check_topology(const RankTopology& topology);

// `nodes` nodes of `ranks_per_node` ranks each, rank = node * ranks_per_node + local index;
// `intra` between ranks of one node, `inter` between nodes.
Result<RankTopology> synthetic_topology(int nodes, int ranks_per_node, Link intra, Link inter);

// Matrix file format (JSON):
//   {"ranks": 4, "node_of": [0, 0, 1, 1],
//    "bandwidth_bytes_per_s": [[0, 2e10, 1e9, 1e9], ...],   ranks rows of ranks numbers
//    "latency_s": [[0, 1e-6, 2e-5, 2e-5], ...]}
// Row = sender, column = receiver; the diagonal is ignored (write 0). "node_of" is optional
// (default: every rank its own node).
std::string topology_to_json(const RankTopology& topology);
Result<RankTopology> topology_from_json(std::string_view text, const std::string& source);
Result<RankTopology> read_topology(const std::string& path);
Status write_topology(const std::string& path, const RankTopology& topology);

}  // namespace spw::sched
