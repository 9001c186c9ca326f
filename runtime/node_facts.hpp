// What this node offers the planner, from hwloc: cores, NUMA nodes with their local memory
// and, where hwloc knows it, their memory kind. Plain data (sched::NodeFacts) so partition/
// stays free of hwloc; hints and reports only, never buffer sizes (a VM's hwloc may report
// less memory than the node has).
#pragma once

#include <string>

#include "kernels/status.hpp"
#include "partition/rank_topology.hpp"

namespace spw {

// Honours hwloc's environment (HWLOC_SYNTHETIC with HWLOC_THISSYSTEM=1 fakes a machine).
// `name` is the node's host name as the caller knows it (MPI's processor name).
Result<sched::NodeFacts> this_node_facts(const std::string& name);

}  // namespace spw
