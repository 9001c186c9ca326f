#include "runtime/engine_binding.hpp"

#include <hwloc.h>

#include <cstdlib>

#include "kernels/topology.hpp"
#include "offload/engine_placement.hpp"
#include "runtime/job_config.hpp"

namespace spw {

namespace {

struct PuSet {
  explicit PuSet(const std::vector<int>& pus) {
    for (int pu : pus) hwloc_bitmap_set(set, static_cast<unsigned>(pu));
  }
  ~PuSet() { hwloc_bitmap_free(set); }
  PuSet(const PuSet&) = delete;
  PuSet& operator=(const PuSet&) = delete;
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
};

std::string pu_list(hwloc_const_cpuset_t set) {
  char* text = nullptr;
  hwloc_bitmap_list_asprintf(&text, set);
  std::string list = text != nullptr ? text : "?";
  std::free(text);
  return list;
}

}  // namespace

Result<EngineBinding> engine_binding_for(int engine_pu, const ThreadSetup& threads) {
  EngineBinding binding;
  binding.compute_pus = threads.compute_pus;
  if (engine_pu == kEnginePuNone) {
    binding.why = "offload.engine_pu = \"none\"";
    return binding;
  }
  SPW_ASSIGN_OR_RETURN(const Topology* topology, Topology::process());
  hwloc_topology_t handle = topology->handle();
  if (engine_pu >= 0) {
    if (hwloc_get_pu_obj_by_os_index(handle, static_cast<unsigned>(engine_pu)) == nullptr) {
      return error(StatusCode::invalid_argument,
                   "offload.engine_pu = " + std::to_string(engine_pu) +
                       ": this node has no such PU (its PUs are " +
                       pu_list(hwloc_topology_get_allowed_cpuset(handle)) +
                       "): choose one of them, \"auto\" or \"none\"");
    }
    binding.pu = engine_pu;
    binding.why = "offload.engine_pu = " + std::to_string(engine_pu);
    return binding;
  }
  // The rank's memory is on the node of its main thread, where the allocator puts it.
  const PuSet rank(threads.rank_pus), compute(threads.compute_pus);
  const offload::EnginePlacement placement = offload::choose_engine_pu(
      handle, rank.set, compute.set, topology->numa_node_of_calling_thread().value_or(-1));
  binding.pu = placement.pu;
  binding.why = "auto: " + placement.why;
  return binding;
}

bool engine_shares_core(const std::vector<int>& engine_cpus,
                        const std::vector<int>& compute_pus) {
  auto topology = Topology::process();
  if (!topology.ok()) return false;
  const PuSet engine(engine_cpus), compute(compute_pus);
  return offload::shares_core_with((*topology)->handle(), engine.set, compute.set);
}

}  // namespace spw
