#include "offload/engine_placement.hpp"

namespace spw::offload {

namespace {

// The PUs of the core OS PU `pu` is on (the PU's own when hwloc shows no core above it), or
// null when the topology has no such PU.
hwloc_const_cpuset_t core_of(hwloc_topology_t topology, int pu) {
  hwloc_obj_t obj = hwloc_get_pu_obj_by_os_index(topology, static_cast<unsigned>(pu));
  if (obj == nullptr) return nullptr;
  hwloc_obj_t core = hwloc_get_ancestor_obj_by_type(topology, HWLOC_OBJ_CORE, obj);
  return (core != nullptr ? core : obj)->cpuset;
}

}  // namespace

bool shares_core_with(hwloc_topology_t topology, hwloc_const_cpuset_t cpus,
                      hwloc_const_cpuset_t compute) {
  for (int pu = hwloc_bitmap_first(cpus); pu >= 0; pu = hwloc_bitmap_next(cpus, pu)) {
    hwloc_const_cpuset_t core = core_of(topology, pu);
    if (core != nullptr && hwloc_bitmap_intersects(core, compute)) return true;
  }
  return false;
}

EnginePlacement choose_engine_pu(hwloc_topology_t topology, hwloc_const_cpuset_t binding,
                                 hwloc_const_cpuset_t compute, int numa_node) {
  // The rank's memory node first: a copy thread on another node reads and writes the
  // stashes across the interconnect.
  hwloc_bitmap_t candidates = hwloc_bitmap_dup(binding);
  hwloc_obj_t node = numa_node >= 0 ? hwloc_get_obj_by_type(topology, HWLOC_OBJ_NUMANODE,
                                                            static_cast<unsigned>(numa_node))
                                    : nullptr;
  if (node != nullptr && hwloc_bitmap_intersects(binding, node->cpuset)) {
    hwloc_bitmap_and(candidates, binding, node->cpuset);
  }
  int spare = -1, sibling = -1, last = -1;
  for (int pu = hwloc_bitmap_first(candidates); pu >= 0; pu = hwloc_bitmap_next(candidates, pu)) {
    hwloc_const_cpuset_t core = core_of(topology, pu);
    if (core == nullptr) continue;
    last = pu;
    if (hwloc_bitmap_isset(compute, static_cast<unsigned>(pu))) continue;
    (hwloc_bitmap_intersects(core, compute) ? sibling : spare) = pu;
  }
  hwloc_bitmap_free(candidates);

  EnginePlacement placement;
  if (spare >= 0) {
    placement = {spare, false, "a core no compute thread runs on"};
  } else if (sibling >= 0) {
    placement = {sibling, true,
                 "an SMT sibling of a compute PU: every core of this rank runs compute threads"};
  } else if (last >= 0) {
    placement = {last, true, "every PU of this rank runs compute threads: it shares a core"};
  } else {
    return {-1, false, "this rank's CPU binding is unknown: left unbound"};
  }
  placement.why = "PU " + std::to_string(placement.pu) + ", " + placement.why;
  return placement;
}

}  // namespace spw::offload
