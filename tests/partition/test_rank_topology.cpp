// Rank topologies: the synthetic cluster, the matrix file and its errors.
#include <gtest/gtest.h>

#include <cstdio>
#include <limits>
#include <string>

#include "partition/rank_topology.hpp"

namespace spw::sched {
namespace {

TEST(RankTopology, SyntheticClusterHasIntraAndInterNodeLinks) {
  const auto t = synthetic_topology(3, 2, {2e10, 1e-6}, {1e9, 2e-5});
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->ranks, 6);
  EXPECT_EQ(t->node_of, (std::vector<int>{0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(t->link(2, 3).bandwidth_bytes_per_s, 2e10);
  EXPECT_EQ(t->link(3, 2).latency_s, 1e-6);
  EXPECT_EQ(t->link(1, 2).bandwidth_bytes_per_s, 1e9);
  EXPECT_EQ(t->link(5, 0).latency_s, 2e-5);
  EXPECT_TRUE(check_topology(*t).ok());
}

TEST(RankTopology, SyntheticRejectsBadCountsAndLinks) {
  EXPECT_EQ(synthetic_topology(0, 4, {1, 0}, {1, 0}).status().message(),
            "synthetic topology: 0 nodes x 4 ranks: both must be >= 1, at most 2^20 ranks");
  EXPECT_EQ(synthetic_topology(2, 2, {0, 0}, {1, 0}).status().message(),
            "synthetic topology: intra-node bandwidth = 0 bytes/s must be a finite number > 0");
  EXPECT_EQ(synthetic_topology(2, 2, {1, 0}, {1, -1}).status().message(),
            "synthetic topology: inter-node latency = -1 s must be finite and >= 0");
}

TEST(RankTopology, MatrixFileRoundTrips) {
  auto t = *synthetic_topology(2, 2, {2e10, 1e-6}, {1.5e9, 2e-5});
  t.links[1 * 4 + 3] = {3.25e9, 7e-6};  // asymmetric: 1 -> 3 differs from 3 -> 1
  const std::string path = ::testing::TempDir() + "spillway_topology.json";
  ASSERT_TRUE(write_topology(path, t).ok());
  const auto back = read_topology(path);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->ranks, 4);
  EXPECT_EQ(back->node_of, t.node_of);
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b)
      if (a != b) {
        EXPECT_EQ(back->link(a, b).bandwidth_bytes_per_s, t.link(a, b).bandwidth_bytes_per_s);
        EXPECT_EQ(back->link(a, b).latency_s, t.link(a, b).latency_s);
      }
  EXPECT_EQ(back->link(1, 3).bandwidth_bytes_per_s, 3.25e9);
  EXPECT_EQ(back->link(3, 1).bandwidth_bytes_per_s, 1.5e9);
  std::remove(path.c_str());
}

TEST(RankTopology, NodeOfIsOptional) {
  const auto t = topology_from_json(
      R"({"ranks": 2, "bandwidth_bytes_per_s": [[0, 1e9], [2e9, 0]], "latency_s": [[0, 0], [0, 0]]})",
      "t.json");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->node_of, (std::vector<int>{0, 1}));
  EXPECT_EQ(t->link(1, 0).bandwidth_bytes_per_s, 2e9);
}

TEST(RankTopology, FileErrorsNameTheKeyRowAndColumn) {
  const auto message = [](const char* text) {
    return topology_from_json(text, "t.json").status().message();
  };
  EXPECT_EQ(message("[1, 2]"), "t.json: the top level must be an object");
  EXPECT_EQ(message(R"({"bandwidth_bytes_per_s": []})"), "t.json: missing key \"ranks\"");
  EXPECT_EQ(message(R"({"ranks": 0})"), "t.json: \"ranks\" must be an integer in [1, 65536], got 0");
  EXPECT_EQ(message(R"({"ranks": 2, "latency_s": [[0, 0], [0, 0]]})"),
            "t.json: missing key \"bandwidth_bytes_per_s\"");
  EXPECT_EQ(message(R"({"ranks": 2, "bandwidth_bytes_per_s": [[0, 1]], "latency_s": []})"),
            "t.json: \"bandwidth_bytes_per_s\" must be an array of 2 rows");
  EXPECT_EQ(message(R"({"ranks": 2, "bandwidth_bytes_per_s": [[0, 1], [1]], "latency_s": []})"),
            "t.json: \"bandwidth_bytes_per_s\" row 1 must hold 2 numbers");
  EXPECT_EQ(
      message(R"({"ranks": 2, "bandwidth_bytes_per_s": [[0, "fast"], [1, 0]], "latency_s": []})"),
      "t.json: \"bandwidth_bytes_per_s\"[0][1] must be a number, got \"fast\"");
  EXPECT_EQ(message(R"({"ranks": 2, "bandwidth_bytes_per_s": [[0, 1e9], [-5, 0]],
                        "latency_s": [[0, 0], [0, 0]]})"),
            "t.json: topology: link 1->0 bandwidth = -5 bytes/s must be a finite number > 0");
  EXPECT_EQ(message(R"({"ranks": 2, "node_of": [0], "bandwidth_bytes_per_s": [[0, 1], [1, 0]],
                        "latency_s": [[0, 0], [0, 0]]})"),
            "t.json: \"node_of\" must be an array of 2 node numbers");
}

TEST(RankTopology, CheckCatchesInconsistentStructs) {
  RankTopology t = *synthetic_topology(1, 2, {1e9, 0}, {1e9, 0});
  t.links.pop_back();
  EXPECT_EQ(check_topology(t).message(),
            "topology: 3 links for 2 ranks (need ranks * ranks = 4)");
  t = *synthetic_topology(1, 2, {1e9, 0}, {1e9, 0});
  t.links[1].latency_s = std::numeric_limits<double>::infinity();
  EXPECT_EQ(check_topology(t).message(),
            "topology: link 0->1 latency = inf s must be finite and >= 0");
  t = *synthetic_topology(1, 2, {1e9, 0}, {1e9, 0});
  t.node_of[1] = -1;
  EXPECT_EQ(check_topology(t).message(), "topology: node_of[1] = -1 must be >= 0");
}

}  // namespace
}  // namespace spw::sched
