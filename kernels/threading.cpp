#include "threading.hpp"

#include <blis.h>
#include <hwloc.h>
#include <omp.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "topology.hpp"

namespace spw {

namespace {

std::atomic<int> g_compute_threads{0};

bool user_controls_binding() {
  const char* bind = std::getenv("OMP_PROC_BIND");
  const char* places = std::getenv("OMP_PLACES");
  const bool bind_set = bind != nullptr && std::strcmp(bind, "") != 0;
  const bool places_set = places != nullptr && std::strcmp(places, "") != 0;
  return bind_set || places_set;
}

std::vector<int> record_pus(hwloc_topology_t topology, int threads) {
  std::vector<int> pus(static_cast<std::size_t>(threads), -1);
#pragma omp parallel num_threads(threads)
  {
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (hwloc_get_last_cpu_location(topology, set, HWLOC_CPUBIND_THREAD) == 0) {
      pus[static_cast<std::size_t>(omp_get_thread_num())] = hwloc_bitmap_first(set);
    }
    hwloc_bitmap_free(set);
  }
  return pus;
}

}  // namespace

int compute_threads() {
  const int chosen = g_compute_threads.load(std::memory_order_relaxed);
  return chosen > 0 ? chosen : omp_get_max_threads();
}

Result<ThreadSetup> setup_threads(const ThreadRequest& request) {
  if (request.threads < 0 || request.local_ranks < 1 || request.local_rank < 0 ||
      request.local_rank >= request.local_ranks) {
    return error(StatusCode::invalid_argument,
                 "setup_threads: threads " + std::to_string(request.threads) + ", local rank " +
                     std::to_string(request.local_rank) + " of " +
                     std::to_string(request.local_ranks) + " is not a valid request");
  }
  SPW_ASSIGN_OR_RETURN(const Topology* topology, Topology::process());
  hwloc_topology_t handle = topology->handle();

  ThreadSetup setup;
  setup.threads = request.threads > 0 ? request.threads : omp_get_max_threads();
  omp_set_num_threads(setup.threads);
  // The OpenMP build of BLIS runs its own parallel regions in the same libgomp pool.
  bli_thread_set_num_threads(setup.threads);
  g_compute_threads.store(setup.threads, std::memory_order_relaxed);

  if (user_controls_binding()) {
    setup.binding = "OMP_PROC_BIND/OMP_PLACES";
  } else if (!request.bind || !topology->is_this_system()) {
    setup.binding = "none";
  } else {
    // This rank's share of the cores it may run on: the cores of its allowed cpuset, split
    // evenly among the ranks on the node when the launcher did not bind them already.
    // The cores the launcher gave this process, as first seen: after a first setup the
    // main thread is bound to one core, and reading the binding again would shrink the set.
    static hwloc_bitmap_t launch_binding = [handle] {
      hwloc_bitmap_t set = hwloc_bitmap_alloc();
      hwloc_get_cpubind(handle, set, HWLOC_CPUBIND_PROCESS);
      return set;
    }();
    hwloc_bitmap_t allowed = hwloc_bitmap_dup(launch_binding);
    const int cores = hwloc_get_nbobjs_inside_cpuset_by_type(handle, allowed, HWLOC_OBJ_CORE);
    const bool launcher_bound = hwloc_bitmap_isequal(allowed, hwloc_topology_get_allowed_cpuset(handle)) == 0;
    const int ranks_sharing = launcher_bound ? 1 : request.local_ranks;
    const int share = cores / ranks_sharing;
    if (share < 1 || share < setup.threads) {
      // Oversubscribed: pinning would stack threads on one core; let the OS spread them.
      setup.binding = "none";
    } else {
      const int first = launcher_bound ? 0 : request.local_rank * share;
      bool all_bound = true;
#pragma omp parallel num_threads(setup.threads) reduction(&& : all_bound)
      {
        const int t = omp_get_thread_num();
        hwloc_obj_t core = hwloc_get_obj_inside_cpuset_by_type(
            handle, allowed, HWLOC_OBJ_CORE, static_cast<unsigned>(first + t));
        all_bound = core != nullptr &&
                    hwloc_set_cpubind(handle, core->cpuset, HWLOC_CPUBIND_THREAD) == 0;
      }
      setup.binding = all_bound ? "hwloc" : "none";
    }
    hwloc_bitmap_free(allowed);
  }
  setup.pu_of_thread = record_pus(handle, setup.threads);
  return setup;
}

}  // namespace spw
