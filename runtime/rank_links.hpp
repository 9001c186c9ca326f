// The ranks' topology as the planner sees it: which node each rank is on, what each node
// offers (hwloc's cores, NUMA nodes, memory and kind) and, for every pair, a bandwidth and
// latency measured by short ping-pongs at start-up.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/status.hpp"
#include "partition/rank_topology.hpp"

namespace spw {

// Collective over `comm`. Pairs meet in a round-robin tournament (n - 1 rounds of disjoint
// pairs), each pair exchanging 8 bytes (latency, best of 10) and `message_bytes` or
// kLinkProbeMinimumBytes, whichever is more (bandwidth, best of 3); links are symmetric. Nodes are
// told apart by MPI's processor name; each node's facts come from its lowest rank's hwloc (none
// when any such rank's fails).
Result<sched::RankTopology> measure_rank_topology(MPI_Comm comm, std::int64_t message_bytes);

// Where the topology of ranks on `hosts` (MPI processor names, one per rank) is cached in
// `dir`: the name carries the rank count and a hash of the host names.
std::string topology_cache_path(const std::string& dir, const std::vector<std::string>& hosts);

// Collective: the topology cached in `dir` by an earlier run of the same ranks on the same
// hosts (topology_cache_path) with node facts, else a fresh measurement that rank 0 then
// caches there.
Result<sched::RankTopology> cached_rank_topology(MPI_Comm comm, const std::string& dir,
                                                 std::int64_t message_bytes);

}  // namespace spw
