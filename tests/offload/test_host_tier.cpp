// Which node the host tier spills to, on synthetic machines, and the error on a machine with
// one memory node (this one; the round trip on a faked two-node machine is
// host_tier_two_nodes_main.cpp).
#include <gtest/gtest.h>
#include <hwloc.h>

#include <cstring>
#include <memory>
#include <string>

#include "kernels/topology.hpp"
#include "offload/host_tier.hpp"

namespace spw::offload {
namespace {

const char* const kOneNodeMessage =
    "offload.tier = \"host\" needs a second memory node (another NUMA node, HBM or NVM), but "
    "this node has one: use offload.tier = \"file\" or \"peer\"";

std::unique_ptr<Topology> synthetic(const std::string& description) {
  auto topology = Topology::synthetic(description);
  EXPECT_TRUE(topology.ok()) << topology.status().message();
  return topology.ok() ? std::move(topology).value() : nullptr;
}

TEST(HostTierNode, TwoPackagesSpillToTheOtherOne) {
  auto topology = synthetic("pack:2 [numa] core:4 pu:1");
  ASSERT_TRUE(topology);
  EXPECT_EQ(*host_tier_node(*topology, 0), 1);
  EXPECT_EQ(*host_tier_node(*topology, 1), 0);
}

TEST(HostTierNode, PrefersTheLargestOtherNode) {
  // Nodes 0 and 2 hold 64 GB, 1 and 3 hold 16 GB.
  auto topology = synthetic("pack:2 [numa(memory=64GB)] [numa(memory=16GB)] core:2 pu:1");
  ASSERT_TRUE(topology);
  ASSERT_EQ(topology->numa_node_count(), 4);
  EXPECT_EQ(*host_tier_node(*topology, 0), 2);
  EXPECT_EQ(*host_tier_node(*topology, 1), 0);
  EXPECT_EQ(*host_tier_node(*topology, 3), 0);
}

TEST(HostTierNode, FromHbmPrefersAnotherKindOverMoreHbm) {
  auto topology = synthetic("pack:2 [numa(memory=64GB)] [numa(memory=16GB)] core:2 pu:1");
  ASSERT_TRUE(topology);
  // Synthetic descriptions carry no memory kinds: label the big nodes HBM as hwloc would.
  for (unsigned i : {0u, 2u}) {
    hwloc_obj_t node = hwloc_get_obj_by_type(topology->handle(), HWLOC_OBJ_NUMANODE, i);
    std::free(node->subtype);
    node->subtype = strdup("HBM");
  }
  EXPECT_EQ(*host_tier_node(*topology, 0), 1);  // 16 GB of DRAM, not 64 GB of HBM
  EXPECT_EQ(*host_tier_node(*topology, 1), 0);  // from DRAM, simply the largest
}

TEST(HostTierNode, OneMemoryNodeHasNoHostTier) {
  auto topology = synthetic("pack:1 core:2 pu:1");
  ASSERT_TRUE(topology);
  auto node = host_tier_node(*topology, 0);
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().code(), StatusCode::unsupported);
  EXPECT_EQ(node.status().message(), kOneNodeMessage);
}

TEST(HostTier, OnThisMachineDependsOnItsMemoryNodes) {
  auto topology = Topology::process();
  ASSERT_TRUE(topology.ok());
  auto tier = make_host_tier();
  if ((*topology)->numa_node_count() == 1) {
    ASSERT_FALSE(tier.ok());
    EXPECT_EQ(tier.status().message(), kOneNodeMessage);
  } else {
    ASSERT_TRUE(tier.ok()) << tier.status().message();
    EXPECT_STREQ((*tier)->name(), "host");
  }
}

}  // namespace
}  // namespace spw::offload
