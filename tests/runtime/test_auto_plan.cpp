// What the planner is told about a job's offload before it plans: whether the engines' copies
// take turns with compute, from the cores a node has and the threads its ranks use.
#include <gtest/gtest.h>

#include "partition/rank_topology.hpp"
#include "runtime/auto_plan.hpp"

namespace spw {
namespace {

sched::RankTopology two_ranks_on(int cores) {
  sched::RankTopology t = *sched::synthetic_topology(1, 2, {1e10, 1e-6}, {1e10, 1e-6});
  t.nodes.assign(1, sched::NodeFacts{});
  t.nodes[0].cores = cores;
  return t;
}

TEST(AutoPlan, CopiesTakeComputeWhenNoCoreIsSpareForTheEngines) {
  const OffloadConfig automatic_engine;
  // 2 ranks x 1 thread on 2 cores: the quickstart job on this VM.
  EXPECT_TRUE(offload_copies_take_compute(two_ranks_on(2), 1, automatic_engine));
  EXPECT_TRUE(offload_copies_take_compute(two_ranks_on(4), 2, automatic_engine));
  EXPECT_FALSE(offload_copies_take_compute(two_ranks_on(4), 1, automatic_engine));
  EXPECT_FALSE(offload_copies_take_compute(two_ranks_on(8), 3, automatic_engine));
  // A node whose cores are unknown is taken to have room.
  EXPECT_FALSE(offload_copies_take_compute(two_ranks_on(0), 1, automatic_engine));
  sched::RankTopology unknown = two_ranks_on(2);
  unknown.nodes.clear();
  EXPECT_FALSE(offload_copies_take_compute(unknown, 1, automatic_engine));
  // An unbound engine floats over the compute threads' cores.
  OffloadConfig unbound;
  unbound.engine_pu = kEnginePuNone;
  EXPECT_TRUE(offload_copies_take_compute(two_ranks_on(64), 1, unbound));
}

}  // namespace
}  // namespace spw
