#include "offload/engine_placement.hpp"

#include <gtest/gtest.h>
#include <hwloc.h>

#include <memory>
#include <string>

#include "kernels/topology.hpp"

namespace spw::offload {
namespace {

// One package, two NUMA nodes of 4 cores with 2 PUs each: node 0 holds PUs 0-7, node 1 PUs
// 8-15, core c PUs 2c and 2c + 1.
class EnginePlacementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto made = Topology::synthetic("pack:1 numa:2 core:4 pu:2");
    ASSERT_TRUE(made.ok()) << made.status().message();
    topology_ = std::move(made).value();
  }
  void TearDown() override {
    for (hwloc_bitmap_t set : sets_) hwloc_bitmap_free(set);
  }
  // A cpuset in hwloc's list syntax, "0-3,8".
  hwloc_const_cpuset_t set(const std::string& list) {
    hwloc_bitmap_t bitmap = hwloc_bitmap_alloc();
    hwloc_bitmap_list_sscanf(bitmap, list.c_str());
    sets_.push_back(bitmap);
    return bitmap;
  }
  EnginePlacement choose(const std::string& binding, const std::string& compute, int node) {
    return choose_engine_pu(topology_->handle(), set(binding), set(compute), node);
  }
  // The whole choice on one line: "PU 7, alone: why" or "PU 3, shared: why".
  std::string chosen(const std::string& binding, const std::string& compute, int node) {
    const EnginePlacement p = choose(binding, compute, node);
    return "PU " + std::to_string(p.pu) + (p.shares_core ? ", shared: " : ", alone: ") + p.why;
  }
  std::unique_ptr<Topology> topology_;
  std::vector<hwloc_bitmap_t> sets_;
};

TEST_F(EnginePlacementTest, TakesASpareCoreOverAnSmtSibling) {
  // Two threads bound to cores 0 and 1 (PUs 0-3) of a rank holding node 0: cores 2 and 3
  // are idle, and the last of their PUs goes to the engine.
  EXPECT_EQ(chosen("0-7", "0-3", 0), "PU 7, alone: PU 7, a core no compute thread runs on");
}

TEST_F(EnginePlacementTest, TakesAFreeSmtSiblingWhenEveryCoreComputes) {
  // OMP_PLACES=threads with one thread on each of cores 0 and 1: their second PUs are free.
  EXPECT_EQ(chosen("0-3", "0,2", 0),
            "PU 3, shared: PU 3, an SMT sibling of a compute PU: every core of this rank runs "
            "compute threads");
}

TEST_F(EnginePlacementTest, SharesTheLastPuWhenComputeUsesEveryPu) {
  EXPECT_EQ(chosen("4-7", "4-7", 0),
            "PU 7, shared: PU 7, every PU of this rank runs compute threads: it shares a core");
}

TEST_F(EnginePlacementTest, StaysOnTheRanksMemoryNodeWhenTheBindingSpansTwo) {
  // A rank bound to the whole package whose thread (and memory) is on node 1, core 4.
  EXPECT_EQ(choose("0-15", "8-9", 1).pu, 15);
  // Its memory on node 0: a core there, though node 1 has spare cores too.
  EXPECT_EQ(choose("0-15", "8-9", 0).pu, 7);
  // Only a compute core of the memory node in the binding: sharing it beats copying the
  // stashes from the other node, where a core is idle.
  EXPECT_EQ(chosen("6-9", "8-9", 1),
            "PU 9, shared: PU 9, every PU of this rank runs compute threads: it shares a core");
  // No node known (threads floating over both): any spare core of the binding.
  EXPECT_EQ(choose("6-9", "8-9", -1).pu, 7);
  // A node the binding has no PU on says nothing about where to go either.
  EXPECT_EQ(choose("0-7", "0-1", 1).pu, 7);
}

TEST_F(EnginePlacementTest, LeavesTheEngineUnboundWithoutABinding) {
  EXPECT_EQ(chosen("", "0-1", 0),
            "PU -1, alone: this rank's CPU binding is unknown: left unbound");
  // PUs the topology does not have are not candidates.
  EXPECT_EQ(choose("64-70", "", -1).pu, -1);
}

TEST_F(EnginePlacementTest, SharesACoreWhenAnyPuMayLandOnAComputeCore) {
  hwloc_topology_t topology = topology_->handle();
  EXPECT_TRUE(shares_core_with(topology, set("1"), set("0")));    // SMT siblings
  EXPECT_FALSE(shares_core_with(topology, set("2-3"), set("0-1")));
  EXPECT_TRUE(shares_core_with(topology, set("0-15"), set("8")));  // unbound, floating
  EXPECT_FALSE(shares_core_with(topology, set(""), set("0-15")));
}

}  // namespace
}  // namespace spw::offload
