// The ranks a job runs on as the planner sees them: which node each rank sits on and, for
// every ordered pair, the bandwidth and latency of a message between them. Connectivity is
// arbitrary (a full matrix), so a fat tree, a torus or a measured matrix all fit; the
// synthetic constructor covers the common "N nodes of r ranks" case. Optionally, what each
// node offers (cores, NUMA nodes, their memory and kind) as plain data: runtime/ fills it
// from hwloc (kernels/topology, the cores and NUMA domains inside one node), and the planner
// and reports only read it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/status.hpp"
#include "partition/simulator.hpp"

namespace spw::sched {

// Facts about a node as hwloc reports them, for planning hints and reports, never for
// sizing buffers: a VM's hwloc may report less memory than the node has.
struct NumaFacts {
  std::int64_t memory_bytes = 0;  // local memory
  std::string kind;               // "DRAM", "HBM", "NVM", ... or "" where hwloc does not say
  int cores = 0;                  // cores local to it
  friend bool operator==(const NumaFacts&, const NumaFacts&) = default;
};

struct NodeFacts {
  std::string name;  // host name; "" when unknown
  int cores = 0;
  std::vector<NumaFacts> numa;
  std::int64_t memory_bytes() const;  // over its NUMA nodes
  friend bool operator==(const NodeFacts&, const NodeFacts&) = default;
};

struct RankTopology {
  int ranks = 0;
  std::vector<int> node_of;  // [rank]
  std::vector<Link> links;   // [from * ranks + to]; the diagonal is free and never used
  std::vector<NodeFacts> nodes;  // [node]: empty when unknown, else covers every node_of

  int ranks_on_node(int node) const;
  // The rank's node's memory shared evenly among the ranks on it; 0 when unknown.
  std::int64_t memory_per_rank(int rank) const;

  const Link& link(int from, int to) const {
    return links[static_cast<std::size_t>(from) * static_cast<std::size_t>(ranks) +
                 static_cast<std::size_t>(to)];
  }
};

// invalid_argument naming the value: ranks < 1, node_of or links of the wrong length, a
// negative node, an off-diagonal bandwidth that is not a positive finite number, a latency
// that is negative or not finite; with node facts, a node_of past them or a negative count.
Status check_topology(const RankTopology& topology);

// `nodes` nodes of `ranks_per_node` ranks each, rank = node * ranks_per_node + local index;
// `intra` between ranks of one node, `inter` between nodes.
Result<RankTopology> synthetic_topology(int nodes, int ranks_per_node, Link intra, Link inter);

// A synthetic topology from text, for planning machines we are not on:
//   "NODESxRANKS[,intra=BANDWIDTH@LATENCY][,inter=BANDWIDTH@LATENCY][,cores=N][,memory=BYTES]"
// e.g. "4x8,inter=1.25e10@2e-6,memory=256GiB": bandwidth in bytes/s, latency in seconds;
// intra defaults to 2e10@1e-6 (shared memory), inter to 1.25e10@2e-6 (100 Gb/s InfiniBand);
// cores and memory (per node; "8GiB" style) give every node one NUMA node with them.
// invalid_argument quoting the spec and the part that is wrong.
Result<RankTopology> topology_from_spec(std::string_view spec);
inline constexpr Link kSpecIntraDefault{2e10, 1e-6};
inline constexpr Link kSpecInterDefault{1.25e10, 2e-6};

// "node 0 (host): 2 cores, 1 NUMA node (4.56 GiB DRAM, 2 cores); 2 ranks, 2.28 GiB each"
std::string describe_node(const RankTopology& topology, int node);

// Matrix file format (JSON):
//   {"ranks": 4, "node_of": [0, 0, 1, 1],
//    "bandwidth_bytes_per_s": [[0, 2e10, 1e9, 1e9], ...],   ranks rows of ranks numbers
//    "latency_s": [[0, 1e-6, 2e-5, 2e-5], ...],
//    "nodes": [{"name": "n0", "cores": 64,
//               "numa": [{"memory_bytes": 1e11, "kind": "DRAM", "cores": 32}, ...]}, ...]}
// Row = sender, column = receiver; the diagonal is ignored (write 0). "node_of" is optional
// (default: every rank its own node), and so are "nodes" (the node facts, indexed by
// node_of) and each node's "name".
std::string topology_to_json(const RankTopology& topology);
// One entry of "nodes", alone (how ranks send their node's facts to each other).
std::string node_facts_to_json(const NodeFacts& node);
Result<NodeFacts> node_facts_from_json(std::string_view text, const std::string& source);
Result<RankTopology> topology_from_json(std::string_view text, const std::string& source);
Result<RankTopology> read_topology(const std::string& path);
Status write_topology(const std::string& path, const RankTopology& topology);

}  // namespace spw::sched
