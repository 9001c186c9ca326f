// From a profile and a pipeline layout to the simulator's CostModel, so the planner's
// predictions and any later `simulate` of the same layout agree by construction.
//
// Stage costs are sums over the stage's blocks of the profile's per-microbatch costs scaled
// to the layout's microbatch (linear in samples, see profile.hpp); a stage's activation is
// its last block's. A stage's ReduceGrads is a ring all-reduce of its gradient bytes over the
// R ranks holding it in the R replicas, in replica order: 2(R-1) steps each moving bytes/R
// over every ring link at once, so each step takes the slowest ring link's
// latency + bytes / (R * bandwidth). Links between the pipeline ranks of one replica come
// from the topology; replicas can differ, so each replica has its own CostModel.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/status.hpp"
#include "partition/profile.hpp"
#include "partition/rank_topology.hpp"
#include "partition/schedule.hpp"
#include "partition/simulator.hpp"

namespace spw::sched {

struct StageRange {
  int first = 0;  // block indices, inclusive
  int last = 0;
  friend bool operator==(const StageRange&, const StageRange&) = default;
};

// Everything about a pipeline except what it is predicted to do.
struct PipelineLayout {
  std::string schedule;  // a generator name
  int pipeline_ranks = 1;  // P
  int replicas = 1;        // R; P * R = the topology's ranks
  int chunks = 1;          // v; global stage s runs on pipeline rank s % P
  int microbatches = 1;    // m, per replica per iteration
  std::int64_t microbatch_samples = 1;
  std::vector<StageRange> stages;  // P * v contiguous ranges covering every block in order
  std::vector<int> world_rank;     // [replica * P + pipeline rank]

  int world_rank_of(int replica, int pipeline_rank) const {
    return world_rank[static_cast<std::size_t>(replica * pipeline_ranks + pipeline_rank)];
  }
};

// The profile's blocks scaled to one microbatch of `samples`, as prefix sums so a stage's
// cost is two lookups.
struct BlockSums {
  std::vector<double> forward, backward_input, backward_weight;  // [blocks + 1]
  std::vector<std::int64_t> stash, parameter, gradient, optimizer_state;  // [blocks + 1]
  std::vector<std::int64_t> activation;                                   // [blocks], not summed
  double optimizer_step_s = 0;   // the whole model's step
  int blocks() const { return static_cast<int>(activation.size()); }
  StageCost stage(StageRange range) const;  // reduce_grads_s left 0
  std::int64_t resident_bytes(StageRange range) const;  // parameters, gradients, optimizer state
};
BlockSums scale_blocks(const ModelProfile& profile, std::int64_t samples);

// A ring all-reduce over world ranks in ring order, keeping only the links that can be the
// slowest step for some message size (on a cluster: one intra- and one inter-node link), so
// pricing a message is O(1) in practice instead of O(R).
class Ring {
 public:
  Ring(const RankTopology& topology, const std::vector<int>& ranks);
  double seconds(std::int64_t bytes) const;  // 0 for one rank

 private:
  double size_ = 1;
  std::vector<Link> slowest_;
};

inline double ring_allreduce_s(const RankTopology& topology, const std::vector<int>& ring,
                               std::int64_t bytes) {
  return Ring(topology, ring).seconds(bytes);
}

// invalid_argument naming the field: P, R, v or m < 1, P * R not the topology's ranks,
// stages that are not P * v non-empty ranges covering the blocks in order, world_rank not a
// permutation of the topology's ranks, an unknown schedule, microbatch_samples < 1.
Status check_layout(const ModelProfile& profile, const RankTopology& topology,
                    const PipelineLayout& layout);

// The cost model of one replica. The optimizer step is the profile's, times the largest
// fraction of the parameters any pipeline rank holds (CostModel has one value for all ranks).
Result<CostModel> make_cost_model(const ModelProfile& profile, const RankTopology& topology,
                                  const PipelineLayout& layout, int replica);

struct Prediction {
  double iteration_s = 0;     // the slowest replica's simulated iteration
  double bubble_fraction = 0;  // of that replica
  std::vector<std::int64_t> peak_memory_bytes;  // [pipeline rank], the largest over replicas
};

// Generates the layout's schedule and simulates every replica (replicas whose links are
// identical are simulated once).
Result<Prediction> predict(const ModelProfile& profile, const RankTopology& topology,
                           const PipelineLayout& layout);

// The pieces of a CostModel, unchecked, for the planner's bounds: every stage's costs with
// its ReduceGrads filled in, and the optimizer step every rank is given.
std::vector<StageCost> stage_costs(const BlockSums& blocks, const RankTopology& topology,
                                   const PipelineLayout& layout, bool ideal = false);
double optimizer_step_s(const BlockSums& blocks, const PipelineLayout& layout);

// The planner's fast path: no checks, the schedule and the scaled blocks already at hand.
// `ideal` replaces every link by a free one and every ring by the topology's fastest link:
// since the simulator's times only grow with costs, that is a lower bound for the same
// stages under any mapping of ranks.
CostModel cost_model(const BlockSums& blocks, const RankTopology& topology,
                     const PipelineLayout& layout, int replica, bool ideal = false);
Result<Prediction> predict(const Schedule& schedule, const BlockSums& blocks,
                           const RankTopology& topology, const PipelineLayout& layout,
                           bool ideal = false);

}  // namespace spw::sched
