#include "partition/plan_memory_hint.hpp"

#include "kernels/memory_ledger.hpp"

namespace spw::sched {

std::string node_memory_warning(const PipelineLayout& layout,
                                const std::vector<std::int64_t>& peak_bytes,
                                const RankTopology& topology) {
  double worst = 1;
  int worst_rank = -1, worst_pipeline_rank = -1;
  for (int replica = 0; replica < layout.replicas; ++replica)
    for (int p = 0; p < layout.ranks_in_pipeline() && p < static_cast<int>(peak_bytes.size());
         ++p) {
      const int rank = layout.world_rank_of(replica, p);
      const std::int64_t share = topology.memory_per_rank(rank);
      if (share <= 0) continue;
      const double ratio = static_cast<double>(peak_bytes[static_cast<std::size_t>(p)]) /
                           static_cast<double>(share);
      if (ratio > worst) worst = ratio, worst_rank = rank, worst_pipeline_rank = p;
    }
  if (worst_rank < 0) return "";
  const int node = topology.node_of[static_cast<std::size_t>(worst_rank)];
  return "warning: rank " + std::to_string(worst_rank) + " (pipeline rank " +
         std::to_string(worst_pipeline_rank) + ") is predicted to peak at " +
         format_bytes(
             static_cast<std::size_t>(peak_bytes[static_cast<std::size_t>(worst_pipeline_rank)])) +
         ", more than the " +
         format_bytes(static_cast<std::size_t>(topology.memory_per_rank(worst_rank))) +
         " per rank that hwloc reports for node " + std::to_string(node) + " (" +
         std::to_string(topology.ranks_on_node(node)) +
         " ranks); set memory.cap to plan within it, or use more ranks";
}

}  // namespace spw::sched
