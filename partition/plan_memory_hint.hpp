// A planning hint from the node facts: a layout whose predicted peak on some rank exceeds
// that rank's share of its node's memory (as hwloc reports it) will not fit there unless
// memory.cap makes the planner plan within it. A hint, not a check: hwloc's memory figure
// can be below the real one (on VMs), so nothing is refused on its account.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "partition/planner_cost.hpp"
#include "partition/rank_topology.hpp"

namespace spw::sched {

// "" when every rank's predicted peak (`peak_bytes[list]`, the pipeline rank, the largest
// over the replicas) is within its node's memory per rank, or when no node facts are known; else
// one line naming the rank whose peak exceeds its share by the largest factor.
std::string node_memory_warning(const PipelineLayout& layout,
                                const std::vector<std::int64_t>& peak_bytes,
                                const RankTopology& topology);

}  // namespace spw::sched
