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

std::vector<int> pus_of(hwloc_const_bitmap_t set) {
  std::vector<int> pus;
  for (int i = hwloc_bitmap_first(set); i >= 0; i = hwloc_bitmap_next(set, i)) pus.push_back(i);
  return pus;
}

// The cores the launcher gave this process, as first seen: after a first setup the main
// thread is bound to one core, and reading the binding again would shrink the set.
hwloc_const_bitmap_t launch_binding(hwloc_topology_t handle) {
  static hwloc_bitmap_t set = [handle] {
    hwloc_bitmap_t launch = hwloc_bitmap_alloc();
    if (hwloc_get_cpubind(handle, launch, HWLOC_CPUBIND_PROCESS) != 0) hwloc_bitmap_zero(launch);
    return launch;
  }();
  return set;
}

// Under OMP_PLACES: every place's PUs into `all` and the places of the first `threads`
// threads into `used`. False when OpenMP has no places or a thread is not on one.
bool omp_place_pus(int threads, hwloc_bitmap_t all, hwloc_bitmap_t used) {
  const int places = omp_get_num_places();
  if (places <= 0) return false;
  auto add_place = [](int place, hwloc_bitmap_t set) {
    std::vector<int> ids(static_cast<std::size_t>(omp_get_place_num_procs(place)));
    omp_get_place_proc_ids(place, ids.data());
    for (int id : ids) hwloc_bitmap_set(set, static_cast<unsigned>(id));
  };
  for (int p = 0; p < places; ++p) add_place(p, all);
  std::vector<int> place_of(static_cast<std::size_t>(threads), -1);
#pragma omp parallel num_threads(threads)
  place_of[static_cast<std::size_t>(omp_get_thread_num())] = omp_get_place_num();
  for (int place : place_of) {
    if (place < 0) return false;
    add_place(place, used);
  }
  return true;
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
  const Result<blas::KernelChoice>& kernels = blas::choose_kernels();
  if (!kernels.ok()) return kernels.status();
  SPW_ASSIGN_OR_RETURN(const Topology* topology, Topology::process());
  hwloc_topology_t handle = topology->handle();

  ThreadSetup setup;
  setup.blas = *kernels;
  setup.threads = request.threads > 0 ? request.threads : omp_get_max_threads();
  omp_set_num_threads(setup.threads);
  // The OpenMP build of BLIS runs its own parallel regions in the same libgomp pool.
  bli_thread_set_num_threads(setup.threads);
  g_compute_threads.store(setup.threads, std::memory_order_relaxed);

  // Filled by each way of placing the threads; floating threads may use the whole rank.
  hwloc_bitmap_t rank = hwloc_bitmap_alloc();
  hwloc_bitmap_t compute = hwloc_bitmap_alloc();
  if (user_controls_binding()) {
    setup.binding = "OMP_PROC_BIND/OMP_PLACES";
    if (!omp_place_pus(setup.threads, rank, compute)) {
      hwloc_bitmap_copy(rank, launch_binding(handle));
      hwloc_bitmap_copy(compute, rank);
    }
  } else if (!request.bind || !topology->is_this_system()) {
    setup.binding = "none";
  } else {
    // This rank's share of the cores it may run on: the cores of its allowed cpuset, split
    // evenly among the ranks on the node when the launcher did not bind them already.
    hwloc_bitmap_t allowed = hwloc_bitmap_dup(launch_binding(handle));
    const int cores = hwloc_get_nbobjs_inside_cpuset_by_type(handle, allowed, HWLOC_OBJ_CORE);
    const bool launcher_bound =
        hwloc_bitmap_isequal(allowed, hwloc_topology_get_allowed_cpuset(handle)) == 0;
    const int ranks_sharing = launcher_bound ? 1 : request.local_ranks;
    const int share = cores / ranks_sharing;
    if (share < 1 || share < setup.threads) {
      // Oversubscribed: pinning would stack threads on one core; let the OS spread them.
      setup.binding = "none";
    } else {
      const int first = launcher_bound ? 0 : request.local_rank * share;
      auto core_at = [&](int i) {
        return hwloc_get_obj_inside_cpuset_by_type(handle, allowed, HWLOC_OBJ_CORE,
                                                   static_cast<unsigned>(i));
      };
      bool all_bound = true;
#pragma omp parallel num_threads(setup.threads) reduction(&& : all_bound)
      {
        hwloc_obj_t core = core_at(first + omp_get_thread_num());
        all_bound = core != nullptr &&
                    hwloc_set_cpubind(handle, core->cpuset, HWLOC_CPUBIND_THREAD) == 0;
      }
      setup.binding = all_bound ? "hwloc" : "none";
      for (int i = first; all_bound && i < first + share; ++i) {
        hwloc_bitmap_or(rank, rank, core_at(i)->cpuset);
        if (i < first + setup.threads) hwloc_bitmap_or(compute, compute, core_at(i)->cpuset);
      }
    }
    hwloc_bitmap_free(allowed);
  }
  if (setup.binding == "none") {
    hwloc_bitmap_copy(rank, launch_binding(handle));
    hwloc_bitmap_copy(compute, rank);
  }
  setup.rank_pus = pus_of(rank);
  setup.compute_pus = pus_of(compute);
  hwloc_bitmap_free(rank);
  hwloc_bitmap_free(compute);
  setup.pu_of_thread = record_pus(handle, setup.threads);
  return setup;
}

}  // namespace spw
