// The automatic planner: from a model's profile, the ranks' topology, the global batch and a
// per-rank memory cap to a pipeline layout (P stages x R replicas using every rank, v chunks,
// m microbatches, a schedule, each stage's block range and each rank's place) that minimises
// the simulator's iteration time with every rank's peak memory within the cap.
//
// Search space: P divides the ranks and R = ranks / P divides the global batch; schedules
// from the request; v = 1, or 2..max_chunks for interleaved-1f1b; m every divisor of
// global_batch / R up to max_microbatches (a multiple of P for interleaved); every
// contiguous partition of the blocks into P * v stages; every mapping of ranks. PipeFB
// (layout automatic or pipefb) adds P stages on 2P ranks per replica, R = ranks / 2P. With
// offload.choose, a candidate that does not fit the cap is also tried with every offload
// tier, keep and lookahead (offload_pass.hpp), costed by planner_offload.hpp.
//
// Branch and bound: each candidate gets a lower bound on its simulated time and memory
// (planner_bound.hpp); candidates are simulated in increasing order of bound until the next
// bound reaches the best time found. Where a shape has few partitions x mappings all are
// candidates and the answer is exact; otherwise partitions come from a min-max search
// (planner_split.hpp) and mappings from a bandwidth chain (planner_mapping.hpp). Shapes with
// more than max_simulated_passes = P * v * m forwards are predicted by the bound itself.
// Offload policies are searched in full when keep x lookahead choices are few, else keep
// is bisected (exactness then not claimed). partition/README.md ("Planner") has the
// details and the complexity.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/status.hpp"
#include "partition/planner_cost.hpp"
#include "partition/profile.hpp"
#include "partition/rank_topology.hpp"

namespace spw::sched {

struct PlanLimits {
  int max_microbatches = 256;  // m candidates: the divisors of global_batch / R up to this
  int max_chunks = 4;          // v candidates for interleaved-1f1b: 2..max_chunks
  // Per shape, search every partition x mapping when there are at most this many.
  std::int64_t exhaustive_candidates = 20000;
  // Above this many forward passes per iteration (P * v * m) a shape is not generated or
  // simulated; its prediction is the closed-form bound.
  std::int64_t max_simulated_passes = 4096;
  // Forward passes (P * v * m per run) the simulator may replay per plan, about 2-3 us
  // each here; exactness is lost when the budget runs out before the bound stops the search.
  std::int64_t simulation_budget = std::int64_t{1} << 18;
  // Offload lookahead candidates: 0..max_lookahead.
  int max_lookahead = 2;
  // Per candidate and tier, every keep x lookahead is simulated when there are at most this
  // many; otherwise, per lookahead, the largest keep that fits is found by bisection.
  int exhaustive_policies = 64;
};

// Which layouts the planner may choose: both kinds (automatic), one rank per stage
// (classic: the request's schedules), or a forward and a backward rank per stage (pipefb).
enum class LayoutChoice { automatic, classic, pipefb };

struct OffloadSearch {
  // Let the planner choose a tier, keep and lookahead for plans that need them to fit the
  // cap (offload.tier = "auto"); off: plans never offload.
  bool choose = false;
  std::vector<OffloadTier> tiers = {OffloadTier::file, OffloadTier::peer};  // no host yet
  OffloadBandwidth bandwidth;  // the file tier's storage bandwidth
  // The job's own policy (offload.tier = "file" or "peer" with its keep and lookahead): every
  // simulated candidate is priced with it, needed or not, since the run will offload so;
  // shapes too large to simulate keep their plain bound. Tier none: no fixed policy. Not
  // together with choose.
  OffloadChoice fixed;
};

struct PlanRequest {
  ModelProfile profile;
  RankTopology topology;
  std::int64_t global_batch = 1;                  // samples per iteration over all replicas
  std::optional<std::int64_t> memory_cap_bytes;  // per rank; none: unlimited
  // The cap is no one's setting but each rank's share of its node's memory (the runtime's
  // node budget over the node's ranks): messages say so and suggest nodes, not a cap.
  bool memory_cap_is_node_share = false;
  // Classic schedules; "pipefb" may be listed too (it is added anyway under automatic).
  std::vector<std::string> schedules = {"gpipe", "1f1b", "interleaved-1f1b", "zb-h1"};
  LayoutChoice layout = LayoutChoice::automatic;
  OffloadSearch offload;
  PlanLimits limits;
  // Receives the executor posts ahead (PipelineSettings::receive_lookahead), each taking its
  // microbatch's memory early; copied into every layout.
  int receive_lookahead = 4;
};

// PipelineLayout::offload is the offload the plan needs (tier none when it fits without).
struct Plan : PipelineLayout {
  double iteration_s = 0;  // predicted
  double bubble_fraction = 0;
  std::vector<std::int64_t> peak_memory_bytes;  // [list], the largest over replicas
  // The busiest rank's copies to and from the tier per iteration, and how much longer the
  // iteration is than the same layout without offload; the rest of the copies is hidden
  // behind compute.
  double offload_transfer_s = 0;
  double offload_exposed_s = 0;
  bool simulated = true;  // false: predicted by the closed-form bound (shape too large)
  // Optimal over the whole search space: every shape searched exhaustively, every
  // candidate that could win simulated.
  bool exact = false;
  // No mapping of ranks can run these stages, schedule and m faster than this (free links,
  // the fastest link for every ring); iteration_s / this - 1 bounds what a better mapping
  // could gain.
  double mapping_lower_bound_s = 0;
  std::int64_t candidates = 0;  // (shape, partition, mapping) triples considered
  int simulations = 0;
  std::string explanation;  // a few lines for people
};

// invalid_argument for a bad profile, topology, global batch (< 1), cap (< 1), receive
// lookahead (< 0), schedule name, "pipefb" among the schedules with layout classic, limit,
// offload tier (host, none) or file bandwidth; memory_cap when no candidate fits, naming the
// smallest peak found and what to change.
Result<Plan> make_plan(const PlanRequest& request);

}  // namespace spw::sched
