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
  EXPECT_EQ(message(R"({"ranks": 0})"),
            "t.json: \"ranks\" must be an integer in [1, 65536], got 0");
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

RankTopology with_node_facts() {
  RankTopology t = *synthetic_topology(2, 2, {2e10, 1e-6}, {1.5e9, 2e-5});
  NodeFacts a{"n0", 8, {{std::int64_t{3} << 30, "DRAM", 4}, {std::int64_t{1} << 30, "HBM", 4}}};
  NodeFacts b{"n1", 2, {{std::int64_t{5} << 30, "", 2}}};
  t.nodes = {a, b};
  return t;
}

TEST(RankTopology, NodeFactsRoundTripThroughTheMatrixFile) {
  const RankTopology t = with_node_facts();
  ASSERT_TRUE(check_topology(t).ok()) << check_topology(t).message();
  const std::string path = ::testing::TempDir() + "spillway_topology_facts.json";
  ASSERT_TRUE(write_topology(path, t).ok());
  const auto back = read_topology(path);
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->nodes.size(), 2u);
  EXPECT_EQ(back->nodes[0], t.nodes[0]);
  EXPECT_EQ(back->nodes[1], t.nodes[1]);
  EXPECT_EQ(back->nodes[0].numa[1].kind, "HBM");
  EXPECT_EQ(back->nodes[0].memory_bytes(), std::int64_t{4} << 30);
  std::remove(path.c_str());
  // Without facts the file has no "nodes" key and reads back without any.
  const auto bare =
      topology_from_json(topology_to_json(*synthetic_topology(1, 2, {1e9, 0}, {1e9, 0})), "t.json");
  ASSERT_TRUE(bare.ok()) << bare.status().message();
  EXPECT_TRUE(bare->nodes.empty());
  EXPECT_EQ(topology_to_json(*bare).find("nodes"), std::string::npos);
}

TEST(RankTopology, MemoryPerRankSharesTheNodeAmongItsRanks) {
  RankTopology t = with_node_facts();
  EXPECT_EQ(t.ranks_on_node(0), 2);
  EXPECT_EQ(t.memory_per_rank(1), std::int64_t{2} << 30);   // 4 GiB over 2 ranks
  EXPECT_EQ(t.memory_per_rank(3), std::int64_t{5} << 29);   // 5 GiB over 2 ranks
  EXPECT_EQ(describe_node(t, 0),
            "node 0 (n0): 8 cores, 2 NUMA nodes (3.00 GiB DRAM, 4 cores; 1.00 GiB HBM, 4 cores); "
            "2 ranks, 2.00 GiB each");
  EXPECT_EQ(describe_node(t, 1),
            "node 1 (n1): 2 cores, 1 NUMA node (5.00 GiB, 2 cores); 2 ranks, 2.50 GiB each");
  t.nodes.clear();
  EXPECT_EQ(t.memory_per_rank(0), 0);
  EXPECT_EQ(describe_node(t, 0), "node 0: no facts known");
}

TEST(RankTopology, NodeFactErrorsNameTheNodeAndKey) {
  RankTopology t = with_node_facts();
  t.nodes.pop_back();
  EXPECT_EQ(check_topology(t).message(),
            "topology: node_of[2] = 1 but facts are given for 1 nodes");
  t = with_node_facts();
  t.nodes[1].numa[0].memory_bytes = -1;
  EXPECT_EQ(check_topology(t).message(),
            "topology: node 1 NUMA node 0: memory_bytes = -1 and cores = 2 must be >= 0");
  const std::string matrix =
      R"("ranks": 1, "bandwidth_bytes_per_s": [[0]], "latency_s": [[0]], "nodes": )";
  const auto message = [&](const std::string& nodes) {
    return topology_from_json("{" + matrix + nodes + "}", "t.json").status().message();
  };
  EXPECT_EQ(message("{}"), "t.json: \"nodes\" must be an array of node objects");
  EXPECT_EQ(message(R"([{"numa": []}])"), "t.json: nodes[0]: missing key \"cores\"");
  EXPECT_EQ(message(R"([{"cores": 2, "numa": [{"memory_bytes": -4, "cores": 2}]}])"),
            "t.json: nodes[0]: numa[0]: \"memory_bytes\" must be an integer >= 0, got -4");
  EXPECT_EQ(message(R"([{"cores": 2, "numa": [{"memory_bytes": 4, "kind": 7, "cores": 2}]}])"),
            "t.json: nodes[0]: numa[0]: \"kind\" must be a string, got 7");
}

TEST(RankTopology, SyntheticSpecsGiveNodesRanksLinksAndFacts) {
  const auto t = topology_from_spec("2x3,inter=1e9@2e-5,memory=64GiB,cores=16");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->ranks, 6);
  EXPECT_EQ(t->node_of, (std::vector<int>{0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(t->link(0, 1).bandwidth_bytes_per_s, kSpecIntraDefault.bandwidth_bytes_per_s);
  EXPECT_EQ(t->link(0, 1).latency_s, kSpecIntraDefault.latency_s);
  EXPECT_EQ(t->link(2, 3).bandwidth_bytes_per_s, 1e9);
  EXPECT_EQ(t->link(5, 0).latency_s, 2e-5);
  ASSERT_EQ(t->nodes.size(), 2u);
  EXPECT_EQ(t->nodes[1].cores, 16);
  EXPECT_EQ(t->nodes[1].memory_bytes(), std::int64_t{64} << 30);
  EXPECT_TRUE(topology_from_spec("1x2")->nodes.empty());
  EXPECT_EQ(topology_from_spec("1x2,intra=5e9@0")->link(1, 0).bandwidth_bytes_per_s, 5e9);

  const auto message = [](const char* spec) { return topology_from_spec(spec).status().message(); };
  EXPECT_EQ(message("four"),
            "topology spec \"four\": must start with NODESxRANKS (ranks per node), e.g. \"2x4\", "
            "got \"four\"");
  EXPECT_EQ(message("2x2,intra=fast"),
            "topology spec \"2x2,intra=fast\": intra must be BANDWIDTH@LATENCY in bytes/s and "
            "seconds, e.g. intra=2e10@1e-6, got \"fast\"");
  EXPECT_EQ(message("2x2,memory=lots"),
            "topology spec \"2x2,memory=lots\": memory must be a byte count such as 256GiB, got "
            "\"lots\"");
  EXPECT_EQ(message("2x2,gpus=4"),
            "topology spec \"2x2,gpus=4\": unknown part \"gpus=4\" (known: intra=, inter=, "
            "cores=, memory=)");
  EXPECT_EQ(message("0x2"),
            "topology spec \"0x2\": synthetic topology: 0 nodes x 2 ranks: both must be >= 1, at "
            "most 2^20 ranks");
  EXPECT_EQ(message("1x2,inter=1e9@-1"),
            "topology spec \"1x2,inter=1e9@-1\": synthetic topology: inter-node latency = -1 s "
            "must be finite and >= 0");
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
