#include "runtime/rank_links.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <vector>

#include "runtime/json_file.hpp"
#include "runtime/mpi_support.hpp"
#include "runtime/node_facts.hpp"

namespace spw {
namespace {

// The partner of `rank` in round `round` of the circle method over `slots` (even) places;
// a partner >= the real rank count is a bye.
int partner(int rank, int round, int slots) {
  const int last = slots - 1;
  if (rank == last) return round;
  if (rank == round) return last;
  return ((2 * round - rank) % last + last) % last;
}

}  // namespace

std::string topology_cache_path(const std::string& dir, const std::vector<std::string>& hosts) {
  std::string joined;
  for (const std::string& name : hosts) joined += name + "\n";
  char hash[32];
  std::snprintf(hash, sizeof hash, "%016zx", std::hash<std::string>{}(joined));
  return dir + "/topology-" + std::to_string(hosts.size()) + "-" + hash + ".json";
}

Result<sched::RankTopology> measure_rank_topology(MPI_Comm comm, std::int64_t message_bytes) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  sched::RankTopology topology;
  topology.ranks = size;
  SPW_ASSIGN_OR_RETURN(RankNodes nodes, gather_rank_nodes(comm));
  topology.node_of = std::move(nodes.node_of);
  topology.nodes = std::move(nodes.nodes);

  // Row `rank` of the matrices: [bandwidth..., latency...].
  std::vector<double> row(2 * static_cast<std::size_t>(size), 0.0);
  message_bytes = std::max(message_bytes, kLinkProbeMinimumBytes);
  const int slots = size % 2 == 0 ? size : size + 1;
  for (int round = 0; round + 1 < slots; ++round) {
    const int peer = partner(rank, round, slots);
    if (peer >= size || peer == rank) continue;
    const bool starts = rank < peer;
    SPW_ASSIGN_OR_RETURN(double latency, ping_pong_seconds(comm, peer, starts, 8, 10));
    SPW_ASSIGN_OR_RETURN(double big, ping_pong_seconds(comm, peer, starts, message_bytes, 3));
    const double transfer = std::max(big - latency, 1e-9);
    row[static_cast<std::size_t>(peer)] = static_cast<double>(message_bytes) / transfer;
    row[static_cast<std::size_t>(size + peer)] = latency;
  }
  std::vector<double> rows(row.size() * static_cast<std::size_t>(size));
  SPW_TRY(mpi_check(MPI_Allgather(row.data(), 2 * size, MPI_DOUBLE, rows.data(), 2 * size,
                                  MPI_DOUBLE, comm),
                    "sharing link measurements"));
  topology.links.resize(static_cast<std::size_t>(size) * static_cast<std::size_t>(size));
  for (int from = 0; from < size; ++from) {
    for (int to = 0; to < size; ++to) {
      if (from == to) continue;
      // Both ends timed the same exchange; the lower rank's figure stands for the pair.
      const int low = std::min(from, to), high = std::max(from, to);
      const std::size_t base = static_cast<std::size_t>(low) * 2 * static_cast<std::size_t>(size);
      sched::Link& link = topology.links[static_cast<std::size_t>(from * size + to)];
      link.bandwidth_bytes_per_s = rows[base + static_cast<std::size_t>(high)];
      link.latency_s = rows[base + static_cast<std::size_t>(size + high)];
    }
  }
  SPW_TRY(sched::check_topology(topology));
  return topology;
}

Result<sched::RankTopology> cached_rank_topology(MPI_Comm comm, const std::string& dir,
                                                 std::int64_t message_bytes) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  SPW_ASSIGN_OR_RETURN(const RankNodes nodes, gather_rank_nodes(comm));
  const std::string path = topology_cache_path(dir, nodes.names);

  // Rank 0 reads the cache and shares the text: one reader, every rank the same answer. A
  // cache from before node facts were recorded counts as none.
  std::string text;
  if (rank == 0 && std::filesystem::exists(path)) {
    std::ifstream in(path);
    std::stringstream buffer;
    buffer << in.rdbuf();
    const auto cached = sched::topology_from_json(buffer.str(), path);
    if (cached.ok() && !cached->nodes.empty()) text = buffer.str();
  }
  SPW_TRY(broadcast_string(comm, text, "sharing the cached link figures"));
  if (!text.empty()) return sched::topology_from_json(text, path);
  SPW_ASSIGN_OR_RETURN(sched::RankTopology topology, measure_rank_topology(comm, message_bytes));
  Status written = Status::success();
  if (rank == 0) written = write_file_atomically(path, sched::topology_to_json(topology));
  SPW_TRY(agree_on_status(comm, written));
  return topology;
}

}  // namespace spw
