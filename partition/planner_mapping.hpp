// Which world rank runs each (replica, pipeline rank). A mapping is a permutation w of the
// ranks read as w[replica * P + pipeline rank].
//
// Small worlds are searched exhaustively (every permutation). For large ones the planner
// tries two layouts of one "bandwidth chain", an order of the ranks in which each next rank
// is the best-connected unvisited one (greedy nearest neighbour, O(N^2)): cut into R
// consecutive pieces, each pipeline runs along the chain, so stages that exchange
// activations sit on the best links (on a cluster: inside a node); dealt out round-robin,
// the R copies of each stage sit next to each other instead, favouring the all-reduce.
// Neither is guaranteed optimal; the planner reports how far any mapping could improve on
// the chosen one (Plan::mapping_lower_bound_s).
//
// PipeFB's 2P lists per pipeline are read off either layout in the order F_0 B_0 F_1 B_1
// ...: a stage's two ranks, which exchange a stash per microbatch (usually the heaviest
// traffic), are neighbours on the chain, and consecutive forward (or backward) ranks two
// apart.
#pragma once

#include <vector>

#include "partition/rank_topology.hpp"

namespace spw::sched {

std::vector<int> bandwidth_chain(const RankTopology& topology);
// Pipelines along the chain is the chain itself: world[j * P + p] = chain[j * P + p].
// world[j * P + p] = chain[p * R + j]
std::vector<int> replicas_along_chain(const std::vector<int>& chain, int pipeline_ranks);
// A mapping whose pipelines hold 2P consecutive positions, reread as PipeFB lists:
// out[j * 2P + s] = world[j * 2P + 2s] (F_s), out[j * 2P + P + s] = world[j * 2P + 2s + 1] (B_s).
std::vector<int> pair_stage_ranks(const std::vector<int>& world, int stages);

}  // namespace spw::sched
