// Link measurement meets every pair of ranks once and agrees on the result everywhere.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <filesystem>

#include "partition/rank_topology.hpp"
#include "runtime/rank_links.hpp"

namespace spw {
namespace {

TEST(RankLinks, EveryPairIsMeasuredAndEveryRankAgrees) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  auto topology = measure_rank_topology(MPI_COMM_WORLD, 1 << 16);
  ASSERT_TRUE(topology.ok()) << topology.status().message();
  ASSERT_EQ(topology->ranks, size);
  for (int from = 0; from < size; ++from) {
    EXPECT_EQ(topology->node_of[static_cast<std::size_t>(from)], 0) << "one host, one node";
    for (int to = 0; to < size; ++to) {
      if (from == to) continue;
      const sched::Link& link = topology->link(from, to);
      EXPECT_TRUE(std::isfinite(link.bandwidth_bytes_per_s) && link.bandwidth_bytes_per_s > 0)
          << from << " -> " << to;
      EXPECT_GT(link.latency_s, 0) << from << " -> " << to;
      EXPECT_EQ(link.bandwidth_bytes_per_s, topology->link(to, from).bandwidth_bytes_per_s);
    }
  }
  // hwloc's facts about the one node: cores and at least one NUMA node with memory.
  ASSERT_EQ(topology->nodes.size(), 1u);
  EXPECT_GT(topology->nodes[0].cores, 0);
  ASSERT_FALSE(topology->nodes[0].numa.empty());
  EXPECT_GT(topology->nodes[0].memory_bytes(), 0);
  // The same matrix on every rank: compare with rank 0's copy.
  std::vector<double> mine;
  for (const auto& link : topology->links) mine.push_back(link.latency_s);
  std::vector<double> root = mine;
  MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  EXPECT_EQ(mine, root);
}

TEST(RankLinks, TheCacheIsReusedByTheSameRanks) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::string dir = (std::filesystem::temp_directory_path() / "spillway-links-test").string();
  if (rank == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  auto first = cached_rank_topology(MPI_COMM_WORLD, dir, 1 << 12);
  ASSERT_TRUE(first.ok()) << first.status().message();
  auto second = cached_rank_topology(MPI_COMM_WORLD, dir, 1 << 12);
  ASSERT_TRUE(second.ok()) << second.status().message();
  EXPECT_EQ(second->nodes, first->nodes);
  // A fresh measurement would differ in its timings; the cached one is the same numbers.
  for (std::size_t i = 0; i < first->links.size(); ++i) {
    EXPECT_EQ(first->links[i].latency_s, second->links[i].latency_s);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    int files = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      files += entry.path().filename().string().rfind("topology-", 0) == 0;
    }
    EXPECT_EQ(files, 1);
    std::filesystem::remove_all(dir);
  }
}

}  // namespace
}  // namespace spw
