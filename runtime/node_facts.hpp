// What the nodes a job runs on offer, from hwloc: cores, NUMA nodes with their local memory
// and, where hwloc knows it, their memory kind; and which ranks share a node (MPI's
// processor names). Plain data (sched::NodeFacts) so partition/ stays free of hwloc and MPI;
// hints and reports only, never buffer sizes (a VM's hwloc may report less memory than the
// node has).
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/status.hpp"
#include "partition/rank_topology.hpp"

namespace spw {

// Honours hwloc's environment (HWLOC_SYNTHETIC with HWLOC_THISSYSTEM=1 fakes a machine).
// `name` is the node's host name as the caller knows it (MPI's processor name).
Result<sched::NodeFacts> this_node_facts(const std::string& name);

// This process's MPI processor name.
std::string processor_name();

struct RankNodes {
  std::vector<std::string> names;       // [rank]: MPI processor name
  std::vector<int> node_of;             // [rank]: nodes numbered in order of first rank
  std::vector<sched::NodeFacts> nodes;  // [node]: from its lowest rank; empty when unknown
};

// Collective over `comm`. A rank whose hwloc fails sends no facts, and then no node's facts
// are known: they are hints, not worth failing a job over.
Result<RankNodes> gather_rank_nodes(MPI_Comm comm);

// report.json's "nodes": per node its facts, its ranks and a one-line description.
nlohmann::json nodes_report(const std::vector<int>& node_of,
                            const std::vector<sched::NodeFacts>& nodes);

}  // namespace spw
