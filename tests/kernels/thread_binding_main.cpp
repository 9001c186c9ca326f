// Where setup_threads puts OpenMP threads. The launch binding is read once per process, so
// ctest runs each case as its own process (tests/kernels/CMakeLists.txt picks the case with
// --gtest_filter and sets the environment it needs).
#include <gtest/gtest.h>
#include <hwloc.h>

#include <set>

#include "kernels/threading.hpp"

namespace spw {
namespace {

// The cores this process may run on, by the OS index of their first PU.
std::vector<int> allowed_core_pus() {
  hwloc_topology_t topology;
  hwloc_topology_init(&topology);
  hwloc_topology_load(topology);
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  hwloc_get_cpubind(topology, set, HWLOC_CPUBIND_PROCESS);
  std::vector<int> pus;
  const int cores = hwloc_get_nbobjs_inside_cpuset_by_type(topology, set, HWLOC_OBJ_CORE);
  for (int i = 0; i < cores; ++i) {
    hwloc_obj_t core = hwloc_get_obj_inside_cpuset_by_type(topology, set, HWLOC_OBJ_CORE,
                                                           static_cast<unsigned>(i));
    pus.push_back(static_cast<int>(hwloc_bitmap_first(core->cpuset)));
  }
  hwloc_bitmap_free(set);
  hwloc_topology_destroy(topology);
  return pus;
}

// The PUs of each core this process may use (or, with `whole_node`, of every core it is
// allowed). Read it before setup_threads, which binds the calling thread and so shrinks
// what hwloc reports as the process binding.
std::vector<std::vector<int>> allowed_cores(bool whole_node = false) {
  hwloc_topology_t topology;
  hwloc_topology_init(&topology);
  hwloc_topology_load(topology);
  hwloc_bitmap_t set = hwloc_bitmap_dup(hwloc_topology_get_allowed_cpuset(topology));
  if (!whole_node) hwloc_get_cpubind(topology, set, HWLOC_CPUBIND_PROCESS);
  std::vector<std::vector<int>> cores;
  const int count = hwloc_get_nbobjs_inside_cpuset_by_type(topology, set, HWLOC_OBJ_CORE);
  for (int i = 0; i < count; ++i) {
    hwloc_obj_t core = hwloc_get_obj_inside_cpuset_by_type(topology, set, HWLOC_OBJ_CORE,
                                                           static_cast<unsigned>(i));
    cores.emplace_back();
    for (int pu = hwloc_bitmap_first(core->cpuset); pu >= 0;
         pu = hwloc_bitmap_next(core->cpuset, pu))
      cores.back().push_back(pu);
  }
  hwloc_bitmap_free(set);
  hwloc_topology_destroy(topology);
  return cores;
}

// Every PU of cores [first, first + count) of `cores`.
std::vector<int> pus_of(const std::vector<std::vector<int>>& cores, std::size_t first,
                        std::size_t count) {
  std::vector<int> pus;
  for (std::size_t i = first; i < first + count; ++i)
    pus.insert(pus.end(), cores[i].begin(), cores[i].end());
  return pus;
}

TEST(ThreadBinding, OneThreadPerCoreOnTheCoresTheProcessMayUse) {
  const std::vector<int> cores = allowed_core_pus();
  const auto launch = allowed_cores();
  ThreadRequest request;
  request.threads = static_cast<int>(cores.size());
  auto setup = setup_threads(request);
  ASSERT_TRUE(setup.ok()) << setup.status().message();
  EXPECT_EQ(setup->binding, "hwloc");
  EXPECT_EQ(compute_threads(), request.threads);
  ASSERT_EQ(setup->pu_of_thread.size(), cores.size());
  // Thread t on core t, in order: no two threads share a core.
  EXPECT_EQ(setup->pu_of_thread, cores);
  const std::vector<int> all = pus_of(launch, 0, launch.size());
  EXPECT_EQ(setup->rank_pus, all);
  EXPECT_EQ(setup->compute_pus, all);
}

TEST(ThreadBinding, OneThreadLeavesTheOtherCoresSpare) {
  const auto cores = allowed_cores();
  if (cores.size() < 2) GTEST_SKIP() << "needs two cores";
  ThreadRequest request;
  request.threads = 1;
  auto setup = setup_threads(request);
  ASSERT_TRUE(setup.ok()) << setup.status().message();
  EXPECT_EQ(setup->binding, "hwloc");
  EXPECT_EQ(setup->rank_pus, pus_of(cores, 0, cores.size()));
  EXPECT_EQ(setup->compute_pus, pus_of(cores, 0, 1));
}

TEST(ThreadBinding, RanksSharingANodeSplitItsCores) {
  const std::vector<int> cores = allowed_core_pus();
  const auto launch = allowed_cores();
  if (cores.size() < 2) GTEST_SKIP() << "needs two cores";
  ThreadRequest request;
  request.threads = 1;
  request.local_ranks = 2;
  request.local_rank = 1;
  auto setup = setup_threads(request);
  ASSERT_TRUE(setup.ok()) << setup.status().message();
  EXPECT_EQ(setup->binding, "hwloc");
  // The second of two ranks takes the first core of the second half.
  EXPECT_EQ(setup->pu_of_thread, std::vector<int>{cores[cores.size() / 2]});
  // Its share is the second half; the first half belongs to the other rank.
  const std::size_t half = launch.size() / 2;
  EXPECT_EQ(setup->rank_pus, pus_of(launch, half, half));
  EXPECT_EQ(setup->compute_pus, pus_of(launch, half, 1));
}

TEST(ThreadBinding, MoreThreadsThanCoresAreLeftToTheOs) {
  const std::vector<int> cores = allowed_core_pus();
  const auto launch = allowed_cores();
  ThreadRequest request;
  request.threads = static_cast<int>(cores.size()) + 1;
  auto setup = setup_threads(request);
  ASSERT_TRUE(setup.ok()) << setup.status().message();
  EXPECT_EQ(setup->binding, "none");
  EXPECT_EQ(compute_threads(), request.threads);
  // Floating threads may use every PU of the rank.
  EXPECT_EQ(setup->rank_pus, pus_of(launch, 0, launch.size()));
  EXPECT_EQ(setup->compute_pus, setup->rank_pus);
}

TEST(ThreadBinding, TheUsersOmpPlacesWin) {
  // libgomp binds the first thread to the first place before main(), so the process binding
  // is already one core here; the places cover what the process was allowed (ctest does not
  // bind it).
  const auto cores = allowed_cores(true);
  ThreadRequest request;
  request.threads = 1;
  auto setup = setup_threads(request);
  ASSERT_TRUE(setup.ok()) << setup.status().message();
  EXPECT_EQ(setup->binding, "OMP_PROC_BIND/OMP_PLACES");
  // OMP_PLACES=cores: one place per core the process may use; the thread takes the first.
  EXPECT_EQ(setup->rank_pus, pus_of(cores, 0, cores.size()));
  EXPECT_EQ(setup->compute_pus, pus_of(cores, 0, 1));
}

TEST(ThreadBinding, ABadRequestNamesItself) {
  ThreadRequest request;
  request.local_rank = 2;
  request.local_ranks = 2;
  auto setup = setup_threads(request);
  ASSERT_FALSE(setup.ok());
  EXPECT_EQ(setup.status().message(),
            "setup_threads: threads 0, local rank 2 of 2 is not a valid request");
}

}  // namespace
}  // namespace spw
