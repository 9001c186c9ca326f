#include "runtime/node_facts.hpp"

#include "kernels/topology.hpp"

namespace spw {

Result<sched::NodeFacts> this_node_facts(const std::string& name) {
  SPW_ASSIGN_OR_RETURN(const Topology* topology, Topology::process());
  sched::NodeFacts facts;
  facts.name = name;
  facts.cores = topology->core_count();
  for (const NumaNodeInfo& numa : topology->numa_nodes()) {
    facts.numa.push_back({static_cast<std::int64_t>(numa.local_memory_bytes), numa.kind,
                          numa.core_count});
  }
  return facts;
}

}  // namespace spw
