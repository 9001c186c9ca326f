// Runs in a process whose hwloc sees a faked two-node machine (HWLOC_SYNTHETIC with
// HWLOC_THISSYSTEM=1, set by ctest). The real machine has one node, so binding to node 0
// works and binding to node 1 must be refused cleanly.
#include <gtest/gtest.h>
#include <hwloc.h>

#include <cstdlib>

#include "kernels/numa_allocator.hpp"
#include "kernels/topology.hpp"

namespace spw {
namespace {

class SyntheticTwoNodeProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(std::getenv("HWLOC_SYNTHETIC"), nullptr) << "run through ctest";
    auto topology = Topology::process();
    ASSERT_TRUE(topology.ok()) << topology.status().message();
    topology_ = *topology;
  }
  const Topology* topology_ = nullptr;
};

TEST_F(SyntheticTwoNodeProcess, SeesTwoNodesAsThisSystem) {
  EXPECT_TRUE(topology_->is_this_system());
  EXPECT_EQ(topology_->numa_node_count(), 2);
  EXPECT_EQ(topology_->capacity_node_for(0), 1);
}

TEST_F(SyntheticTwoNodeProcess, LocalAllocationBindsToTheThreadsNode) {
  // The real PUs 0..1 lie in the synthetic first package, so node 0 is local.
  hwloc_bitmap_t pu0 = hwloc_bitmap_alloc();
  hwloc_bitmap_set(pu0, 0);
  ASSERT_EQ(hwloc_set_cpubind(topology_->handle(), pu0, HWLOC_CPUBIND_THREAD), 0);
  hwloc_bitmap_free(pu0);
  ASSERT_EQ(topology_->numa_node_of_calling_thread(), 0);

  auto allocation = allocate(1 << 20, MemoryCategory::stash);
  ASSERT_TRUE(allocation.ok()) << allocation.status().message();
  EXPECT_EQ((*allocation)->bound_node(), 0);
  EXPECT_TRUE((*allocation)->binding_note().empty()) << (*allocation)->binding_note();
}

TEST_F(SyntheticTwoNodeProcess, BindingToAMissingPhysicalNodeFailsCleanly) {
  const std::size_t before = MemoryLedger::process().current_total();
  auto strict = allocate(1 << 20, MemoryCategory::stash, MemoryPlacement::on_node(1, true));
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.status().code(), StatusCode::unsupported);
  EXPECT_NE(strict.status().message().find("binding to NUMA node 1 refused"), std::string::npos)
      << strict.status().message();
  EXPECT_EQ(MemoryLedger::process().current_total(), before);

  auto relaxed = allocate(1 << 20, MemoryCategory::stash, MemoryPlacement::on_node(1));
  ASSERT_TRUE(relaxed.ok()) << relaxed.status().message();
  EXPECT_EQ((*relaxed)->bound_node(), -1);
  EXPECT_NE((*relaxed)->binding_note().find("node 1"), std::string::npos);
}

}  // namespace
}  // namespace spw
