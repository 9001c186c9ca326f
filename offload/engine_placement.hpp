// Which PU the offload engine's thread should run on. The engine copies while the compute
// threads work; on a core of their own the copies cost them nothing, on a compute core they
// take turns with a compute thread. Pure functions of a topology and cpusets, so they can be
// tested on synthetic machines; the runtime feeds them this rank's binding.
#pragma once

#include <hwloc.h>

#include <string>

namespace spw::offload {

struct EnginePlacement {
  int pu = -1;               // OS index of the PU; -1: leave the engine unbound
  bool shares_core = false;  // that PU's core also runs compute threads
  std::string why;           // one line for the report
};

// A PU of `binding` (the PUs this rank may use) on NUMA node `numa_node` (logical index,
// the node the rank's memory is on; -1 or a node outside the binding: the whole binding),
// preferring one on a core no PU of `compute` (where the OpenMP threads may run) is on,
// then a free SMT sibling of a compute PU, else the binding's last PU, which then shares
// a core with compute. Ties go to the highest PU: compute threads fill cores from the first.
// An empty binding gives pu -1.
EnginePlacement choose_engine_pu(hwloc_topology_t topology, hwloc_const_cpuset_t binding,
                                 hwloc_const_cpuset_t compute, int numa_node);

// Whether a thread that may run on `cpus` can land on a core that a PU of `compute` is on.
bool shares_core_with(hwloc_topology_t topology, hwloc_const_cpuset_t cpus,
                      hwloc_const_cpuset_t compute);

}  // namespace spw::offload
