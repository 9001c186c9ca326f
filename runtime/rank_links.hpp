// The ranks' topology as the planner sees it: which node each rank is on and, for every
// pair, a bandwidth and latency measured by short ping-pongs at start-up.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>

#include "kernels/status.hpp"
#include "partition/rank_topology.hpp"

namespace spw {

// Collective over `comm`. Pairs meet in a round-robin tournament (n - 1 rounds of disjoint
// pairs), each pair exchanging 8 bytes (latency, best of 10) and `message_bytes` (bandwidth,
// best of 3); links are taken as symmetric. Nodes are told apart by MPI's processor name.
Result<sched::RankTopology> measure_rank_topology(MPI_Comm comm, std::int64_t message_bytes);

// Collective: the topology cached in `dir` by an earlier run of the same ranks on the same
// hosts, else a fresh measurement that rank 0 then caches there. The cache file's name
// carries the rank count and a hash of the host names.
Result<sched::RankTopology> cached_rank_topology(MPI_Comm comm, const std::string& dir,
                                                 std::int64_t message_bytes);

}  // namespace spw
