// The node's hardware as hwloc sees it: NUMA nodes (with memory kind where hwloc knows it),
// cores and PUs. Loaded once per process; synthetic topologies can be made for tests and for
// planning machines we are not running on.
#pragma once

#include <hwloc.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "status.hpp"

namespace spw {

struct NumaNodeInfo {
  int logical_index = 0;
  unsigned os_index = 0;
  std::uint64_t local_memory_bytes = 0;  // as hwloc reports it (may undercount on VMs)
  std::string kind;                      // hwloc's subtype ("HBM", "DRAM", "NVM"), or ""
  int core_count = 0;                    // cores whose PUs are local to this node
};

class Topology {
 public:
  ~Topology();
  Topology(const Topology&) = delete;
  Topology& operator=(const Topology&) = delete;

  // Loads this machine's topology. Honours hwloc's environment (HWLOC_SYNTHETIC,
  // HWLOC_THISSYSTEM, HWLOC_XMLFILE), so tests can fake a machine for a whole process.
  static Result<std::unique_ptr<Topology>> load();
  // A synthetic topology such as "pack:2 [numa] core:4 pu:1", for tests and planning.
  // It never describes this system: nothing can be bound on it.
  static Result<std::unique_ptr<Topology>> synthetic(const std::string& description);
  // The topology this process runs on, loaded on first use.
  static Result<const Topology*> process();

  hwloc_topology_t handle() const { return topology_; }
  bool is_this_system() const;
  int numa_node_count() const;
  int core_count() const;
  int pu_count() const;
  std::vector<NumaNodeInfo> numa_nodes() const;

  // The NUMA node (logical index) that holds every PU of `cpuset`, or nullopt when the set is
  // empty or spans several nodes (then no single node is "local").
  std::optional<int> numa_node_of_cpuset(hwloc_const_cpuset_t cpuset) const;
  // The node local to the calling thread's current binding, if it is bound within one node.
  std::optional<int> numa_node_of_calling_thread() const;
  // The node to spill to from `working_node`: a different node, preferring a capacity kind
  // (DRAM or NVM when the working node is HBM), then the largest. nullopt with one node.
  std::optional<int> capacity_node_for(int working_node) const;

 private:
  explicit Topology(hwloc_topology_t topology) : topology_(topology) {}
  hwloc_topology_t topology_;
};

}  // namespace spw
