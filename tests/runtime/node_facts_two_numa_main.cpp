// Node facts in a process whose hwloc sees a faked machine of two packages, each with its
// own NUMA node and 4 cores (HWLOC_SYNTHETIC with HWLOC_THISSYSTEM=1, set by ctest): both
// NUMA nodes are reported with their cores, and survive the topology file.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "partition/rank_topology.hpp"
#include "runtime/node_facts.hpp"

namespace spw {
namespace {

TEST(NodeFactsOnTwoNumaNodes, ReportsBothNodesWithTheirCores) {
  ASSERT_NE(std::getenv("HWLOC_SYNTHETIC"), nullptr) << "run through ctest";
  const auto facts = this_node_facts("fake-host");
  ASSERT_TRUE(facts.ok()) << facts.status().message();
  EXPECT_EQ(facts->name, "fake-host");
  EXPECT_EQ(facts->cores, 8);
  ASSERT_EQ(facts->numa.size(), 2u);
  EXPECT_EQ(facts->numa[0].cores, 4);
  EXPECT_EQ(facts->numa[1].cores, 4);

  auto topology = sched::synthetic_topology(1, 2, {1e10, 1e-6}, {1e10, 1e-6});
  ASSERT_TRUE(topology.ok());
  topology->nodes = {*facts};
  const std::string path = ::testing::TempDir() + "spillway_node_facts.json";
  ASSERT_TRUE(sched::write_topology(path, *topology).ok());
  const auto back = sched::read_topology(path);
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->nodes.size(), 1u);
  EXPECT_EQ(back->nodes[0], *facts);
  EXPECT_NE(sched::describe_node(*back, 0).find("8 cores, 2 NUMA nodes"), std::string::npos)
      << sched::describe_node(*back, 0);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace spw
