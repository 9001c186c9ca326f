#include "runtime/node_facts.hpp"

#include <algorithm>

#include "kernels/topology.hpp"
#include "runtime/mpi_support.hpp"

namespace spw {

Result<sched::NodeFacts> this_node_facts(const std::string& name) {
  SPW_ASSIGN_OR_RETURN(const Topology* topology, Topology::process());
  sched::NodeFacts facts;
  facts.name = name;
  facts.cores = topology->core_count();
  for (const NumaNodeInfo& numa : topology->numa_nodes()) {
    facts.numa.push_back({static_cast<std::int64_t>(numa.local_memory_bytes), numa.kind,
                          numa.core_count});
  }
  return facts;
}

std::string processor_name() {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(name, &length);
  return name;
}

Result<RankNodes> gather_rank_nodes(MPI_Comm comm) {
  int rank = 0, size = 1;
  SPW_TRY(mpi_check(MPI_Comm_rank(comm, &rank), "sharing node facts"));
  SPW_TRY(mpi_check(MPI_Comm_size(comm, &size), "sharing node facts"));
  RankNodes out;
  const std::string name = processor_name();
  std::string mine;
  if (auto facts = this_node_facts(name); facts.ok()) mine = sched::node_facts_to_json(*facts);

  // Every rank's name (fixed width) and facts (JSON text of any length), everywhere.
  std::vector<char> names(static_cast<std::size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  std::vector<char> padded(MPI_MAX_PROCESSOR_NAME, '\0');
  name.copy(padded.data(), MPI_MAX_PROCESSOR_NAME - 1);
  SPW_TRY(mpi_check(MPI_Allgather(padded.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(),
                                  MPI_MAX_PROCESSOR_NAME, MPI_CHAR, comm),
                    "sharing processor names"));
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(static_cast<std::size_t>(size));
  SPW_TRY(mpi_check(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm),
                    "sharing node facts"));
  std::vector<int> offsets(lengths.size(), 0);
  for (std::size_t r = 1; r < lengths.size(); ++r) offsets[r] = offsets[r - 1] + lengths[r - 1];
  std::string all(static_cast<std::size_t>(offsets.back() + lengths.back()), '\0');
  SPW_TRY(mpi_check(MPI_Allgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(),
                                   offsets.data(), MPI_CHAR, comm),
                    "sharing node facts"));

  bool known = true;
  for (int r = 0; r < size; ++r) {
    const auto at = static_cast<std::size_t>(r);
    out.names.emplace_back(names.data() + at * MPI_MAX_PROCESSOR_NAME);
    const auto first = std::find(out.names.begin(), out.names.end(), out.names[at]);
    if (first != out.names.end() - 1) {  // an earlier rank numbered this node
      out.node_of.push_back(out.node_of[static_cast<std::size_t>(first - out.names.begin())]);
      continue;
    }
    out.node_of.push_back(static_cast<int>(out.nodes.size()));
    auto facts = sched::node_facts_from_json(
        std::string_view(all).substr(static_cast<std::size_t>(offsets[at]),
                                     static_cast<std::size_t>(lengths[at])),
        "node facts of rank " + std::to_string(r));
    known = known && lengths[at] > 0 && facts.ok();
    out.nodes.push_back(known ? std::move(facts).value() : sched::NodeFacts{});
  }
  if (!known) out.nodes.clear();
  return out;
}

nlohmann::json nodes_report(const std::vector<int>& node_of,
                            const std::vector<sched::NodeFacts>& nodes) {
  sched::RankTopology described;
  described.ranks = static_cast<int>(node_of.size());
  described.node_of = node_of;
  described.nodes = nodes;
  nlohmann::json out = nlohmann::json::array();
  for (std::size_t n = 0; n < nodes.size(); ++n) {
    nlohmann::json node = nlohmann::json::parse(sched::node_facts_to_json(nodes[n]));
    node["memory_bytes"] = nodes[n].memory_bytes();
    std::vector<int> ranks;
    for (std::size_t r = 0; r < node_of.size(); ++r)
      if (node_of[r] == static_cast<int>(n)) ranks.push_back(static_cast<int>(r));
    node["ranks"] = ranks;
    node["description"] = sched::describe_node(described, static_cast<int>(n));
    out.push_back(std::move(node));
  }
  return out;
}

}  // namespace spw
