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

TEST(ThreadBinding, OneThreadPerCoreOnTheCoresTheProcessMayUse) {
  const std::vector<int> cores = allowed_core_pus();
  ThreadRequest request;
  request.threads = static_cast<int>(cores.size());
  auto setup = setup_threads(request);
  ASSERT_TRUE(setup.ok()) << setup.status().message();
  EXPECT_EQ(setup->binding, "hwloc");
  EXPECT_EQ(compute_threads(), request.threads);
  ASSERT_EQ(setup->pu_of_thread.size(), cores.size());
  // Thread t on core t, in order: no two threads share a core.
  EXPECT_EQ(setup->pu_of_thread, cores);
}

TEST(ThreadBinding, RanksSharingANodeSplitItsCores) {
  const std::vector<int> cores = allowed_core_pus();
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
}

TEST(ThreadBinding, MoreThreadsThanCoresAreLeftToTheOs) {
  const std::vector<int> cores = allowed_core_pus();
  ThreadRequest request;
  request.threads = static_cast<int>(cores.size()) + 1;
  auto setup = setup_threads(request);
  ASSERT_TRUE(setup.ok()) << setup.status().message();
  EXPECT_EQ(setup->binding, "none");
  EXPECT_EQ(compute_threads(), request.threads);
}

TEST(ThreadBinding, TheUsersOmpPlacesWin) {
  ThreadRequest request;
  request.threads = 1;
  auto setup = setup_threads(request);
  ASSERT_TRUE(setup.ok()) << setup.status().message();
  EXPECT_EQ(setup->binding, "OMP_PROC_BIND/OMP_PLACES");
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
