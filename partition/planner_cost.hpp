// From a profile and a pipeline layout to the simulator's CostModel, so the planner's
// predictions and any later `simulate` of the same layout agree by construction.
//
// Stage costs are sums over the stage's blocks of the profile's per-microbatch costs scaled
// to the layout's microbatch (linear in samples, see profile.hpp); a stage's activation is
// its last block's. Its stash adds to the blocks' saved state the stage's input and every
// block output inside the stage (what the executor's slot keeps and SendStash moves), its
// backward bytes add their gradients to the blocks' backward buffers; its workspace is the
// blocks' sum and its scratch their largest. A stage's ReduceGrads is a ring all-reduce of its
// gradient bytes over the R ranks holding it in the R replicas, in replica order: 2(R-1) steps each
// moving bytes/R over every ring link at once, so each step takes the slowest ring link's latency +
// bytes / (R * bandwidth), over the ranks running the stage's backwards. Links between the ranks of
// one replica come from the topology; replicas can differ, so each replica has its own CostModel.
// With an offload tier the stages also get offload and prefetch seconds, and ranks the memory the
// tier reserves (planner_offload.hpp).
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

// Where the offload pass sends stashes (offload/ has the tiers). host needs a second memory
// node, which RankTopology does not describe yet, so the planner does not choose it.
enum class OffloadTier : std::uint8_t { none, file, peer, host };
const char* offload_tier_name(OffloadTier tier);  // "none", "file", "peer", "host"

// What a tier's copies cost beyond the topology (the peer tier's copies take the link to
// the partner rank): the file tier's storage bandwidth, each direction. The default, 1 GB/s,
// is a conservative figure for a node-local SSD; give a measured sequential bandwidth.
struct OffloadBandwidth {
  double file_bytes_per_s = 1e9;
  // The ranks' offload engines have no cores of their own, so every copy takes turns with
  // compute (CostModel::copies_take_compute).
  bool copies_take_compute = false;
};

// The offload pass's policy (offload_pass.hpp) on a tier; tier none ignores keep and
// lookahead.
struct OffloadChoice {
  OffloadTier tier = OffloadTier::none;
  int keep = 0;
  int lookahead = 0;
  friend bool operator==(const OffloadChoice&, const OffloadChoice&) = default;
};

// Everything about a pipeline except what it is predicted to do.
//
// A pipeline is the schedule's lists ("pipeline ranks" in the runtime): P of them, one per
// rank, except under PipeFB, whose P stages have a forward rank (list s) and a backward
// rank (list P + s) each, 2P lists in all.
struct PipelineLayout {
  std::string schedule;    // a generator name
  int pipeline_ranks = 1;  // P: stage positions; lists per pipeline unless stages split
  int replicas = 1;        // R; ranks_in_pipeline() * R = the topology's ranks
  int chunks = 1;          // v; global stage s runs on list s % P (PipeFB: v = 1)
  int microbatches = 1;    // m, per replica per iteration
  std::int64_t microbatch_samples = 1;
  std::vector<StageRange> stages;  // P * v contiguous ranges covering every block in order
  std::vector<int> world_rank;     // [replica * ranks_in_pipeline() + list]
  OffloadChoice offload;           // applied to every rank of the layout
  // How many receives ahead the executor posts (PipelineSettings::receive_lookahead): each
  // takes its microbatch's memory early.
  int receive_lookahead = 4;

  // 2 when the schedule puts a stage's forwards and backwards on two ranks (PipeFB).
  int ranks_per_stage() const { return schedule == "pipefb" ? 2 : 1; }
  int ranks_in_pipeline() const { return pipeline_ranks * ranks_per_stage(); }
  int world_rank_of(int replica, int list) const {
    return world_rank[static_cast<std::size_t>(replica * ranks_in_pipeline() + list)];
  }
  // The list running a stage's backwards: the one that reduces its gradients and steps.
  int backward_list_of(int stage) const {
    return ranks_per_stage() == 2 ? pipeline_ranks + stage : stage % pipeline_ranks;
  }
  // The list running a stage's forwards (the same list unless the stage is split).
  int forward_list_of(int stage) const { return stage % pipeline_ranks; }
};

// The profile's blocks scaled to one microbatch of `samples`, as prefix sums so a stage's
// cost is two lookups.
struct BlockSums {
  std::vector<double> forward, backward_input, backward_weight;  // [blocks + 1]
  std::vector<std::int64_t> stash, parameter, gradient, optimizer_state;  // [blocks + 1]
  std::vector<std::int64_t> backward, workspace, outputs;                 // [blocks + 1]
  std::vector<std::int64_t> activation;                                   // [blocks], not summed
  // scratch_max[j][i]: the largest scratch of blocks i .. i + 2^j - 1 (a sparse table).
  std::vector<std::vector<std::int64_t>> scratch_max;
  double optimizer_step_s = 0;   // the whole model's step
  int blocks() const { return static_cast<int>(activation.size()); }
  StageCost stage(StageRange range) const;  // reduce_grads_s left 0
  std::int64_t resident_bytes(StageRange range) const;  // parameters, gradients, optimizer state
  // What one microbatch's stash holds on the stage: its input, inner outputs, saved state.
  std::int64_t stash_bytes(StageRange range) const;
  std::int64_t scratch_bytes(StageRange range) const;
};
// The profile's blocks on microbatches of `samples` (profile.hpp: how times and bytes scale).
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

// invalid_argument naming the field: P, R, v or m < 1, ranks_in_pipeline() * R not the
// topology's ranks, stages that are not P * v non-empty ranges covering the blocks in order,
// world_rank not a permutation of the topology's ranks, an unknown schedule, v > 1 under
// PipeFB, microbatch_samples < 1, a negative receive lookahead, keep or lookahead, the host
// tier (not modelled)
// or the peer tier where a rank has no partner (planner_offload.hpp).
Status check_layout(const ModelProfile& profile, const RankTopology& topology,
                    const PipelineLayout& layout);

// The cost model of one replica. The optimizer step is the profile's, times the largest
// fraction of the parameters any rank holds (CostModel has one value for all ranks).
Result<CostModel> make_cost_model(const ModelProfile& profile, const RankTopology& topology,
                                  const PipelineLayout& layout, int replica,
                                  const OffloadBandwidth& bandwidth = {});

// How the executor holds microbatches: the layout's receive lookahead, and slots pooled
// unless it offloads.
MemoryModel memory_model(const PipelineLayout& layout);

struct Prediction {
  double iteration_s = 0;     // the slowest replica's simulated iteration
  double bubble_fraction = 0;  // of that replica
  std::vector<std::int64_t> peak_memory_bytes;  // [list], the largest over replicas
  double offload_transfer_s = 0;  // the busiest offload stream's time per iteration
};

// Generates the layout's schedule (with the offload pass when layout.offload has a tier)
// and simulates every replica (replicas whose links are identical are simulated once). The
// peaks include what the offload tier reserves on each rank.
Result<Prediction> predict(const ModelProfile& profile, const RankTopology& topology,
                           const PipelineLayout& layout, const OffloadBandwidth& bandwidth = {});

// The pieces of a CostModel, unchecked, for the planner's bounds: every stage's costs with
// its ReduceGrads filled in, and the optimizer step every rank is given.
std::vector<StageCost> stage_costs(const BlockSums& blocks, const RankTopology& topology,
                                   const PipelineLayout& layout, bool ideal = false);
double optimizer_step_s(const BlockSums& blocks, const PipelineLayout& layout);

// The planner's fast path: no checks, the schedule (already through the offload pass when
// layout.offload has a tier) and the scaled blocks at hand. `ideal` replaces every link by
// a free one and every ring by the topology's fastest link and ignores the offload: since
// the simulator's times only grow with costs, that is a lower bound for the same stages
// under any mapping of ranks, with or without offload.
CostModel cost_model(const BlockSums& blocks, const RankTopology& topology,
                     const PipelineLayout& layout, int replica, bool ideal = false,
                     const OffloadBandwidth& bandwidth = {});
Result<Prediction> predict(const Schedule& schedule, const BlockSums& blocks,
                           const RankTopology& topology, const PipelineLayout& layout,
                           bool ideal = false, const OffloadBandwidth& bandwidth = {});

// No mapping of ranks runs `layout`'s stages, schedule and m faster than this (Plan::
// mapping_lower_bound_s): `plain_schedule`, the layout's schedule without the offload pass,
// predicted ideal, since offloading makes nothing faster either.
Result<double> mapping_lower_bound_s(const Schedule& plain_schedule, const BlockSums& blocks,
                                     const RankTopology& topology, PipelineLayout layout);

}  // namespace spw::sched
