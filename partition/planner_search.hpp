// The planner's search (make_plan, planner.hpp), shared by the files that implement it:
// planner.cpp (shapes, partitions, mappings, candidates, the search itself),
// planner_offload_search.cpp (offload policies for a candidate) and planner_explain.cpp (the
// plan's numbers and explanation). Not part of the partition library's interface.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "partition/generators.hpp"
#include "partition/offload_pass.hpp"
#include "partition/plan_memory_hint.hpp"
#include "partition/planner.hpp"
#include "partition/planner_bound.hpp"
#include "partition/planner_mapping.hpp"
#include "partition/planner_offload.hpp"
#include "partition/planner_split.hpp"
#include "partition/validator.hpp"

namespace spw::sched::planner_detail {

inline std::size_t index(int i) { return static_cast<std::size_t>(i); }

inline Status bad(const std::string& message) {
  return error(StatusCode::invalid_argument, message);
}

inline std::string bytes_text(std::int64_t bytes) {
  char text[48];
  std::snprintf(text, sizeof text, "%.3g GiB (%lld bytes)", static_cast<double>(bytes) / (1 << 30),
                static_cast<long long>(bytes));
  return text;
}

inline std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g s", s);
  return text;
}

inline std::string offload_text(const OffloadChoice& o) {
  return std::string(offload_tier_name(o.tier)) + " keep " + std::to_string(o.keep) +
         " lookahead " + std::to_string(o.lookahead);
}

// Layouts come in two families the explanation compares: one rank per stage, or two.
enum Family { kClassic = 0, kSplit = 1 };
inline const char* family_name(int family) { return family == kSplit ? "pipefb" : "classic"; }

// One point of the search space without partition and mapping.
struct Shape {
  std::string schedule;
  int P = 1, R = 1, v = 1, m = 1;
  bool split = false;  // PipeFB: 2P lists
  std::int64_t samples = 1;
  const BlockSums* blocks = nullptr;
  std::unique_ptr<Schedule> generated;  // null: too large, predicted in closed form
  ScheduleFacts facts;
  bool exhaustive = false;
  std::vector<std::vector<StageRange>> partitions;
  // The mapping-independent min-max splits, once found: [fits stashes in full, with
  // offload]; -1 not searched yet, -2 none fits.
  std::array<int, 2> plain_split = {-1, -1};
  int keep_limit = 0;  // offload_keep_limit of the generated schedule
  std::vector<int> max_live_stashes;  // the validator's, per list, once needed
  std::map<std::pair<int, int>, Schedule> offloaded;  // by (keep, lookahead)

  int lists() const { return split ? 2 * P : P; }
  int family() const { return split ? kSplit : kClassic; }
  std::string name() const {
    return "P=" + std::to_string(P) + " R=" + std::to_string(R) + " " + schedule +
           (v > 1 ? " v=" + std::to_string(v) : "") + " m=" + std::to_string(m);
  }
};

struct Candidate {
  double bound = 0;
  int shape = 0, partition = 0, mapping = 0;
};

struct Evaluated {
  Prediction prediction;
  std::int64_t peak = 0;
  OffloadChoice offload;   // tier none: the plain schedule
  double exposed_s = 0;    // iteration_s minus the same candidate without offload
};

// The best fitting plan found in one family, and what is known when there is none.
struct FamilyRecord {
  int shapes = 0;
  int candidates = 0;  // within the memory bound
  std::optional<std::pair<Candidate, Evaluated>> best;
};

class Search {
 public:
  explicit Search(const PlanRequest& request)
      : q_(request), topo_(request.topology), n_(static_cast<int>(request.profile.blocks.size())) {}
  Result<Plan> run();

 private:
  Status enumerate_shapes();
  void prepare_mappings();
  std::vector<int> heuristic_mappings(const Shape& shape);
  void add_candidates(int shape_index);
  void add_minmax_partitions(Shape& shape, int mapping, std::vector<int>& partition_of);
  PipelineLayout layout(const Shape& shape, int partition, int mapping) const;
  double bound(const Shape& shape, const PipelineLayout& layout) const;
  std::int64_t memory_bound(const Shape& shape, const std::vector<StageRange>& stages,
                            bool offloadable) const;
  Result<Evaluated> evaluate(const Shape& shape, const PipelineLayout& layout, double bound);
  Result<Evaluated> simulate_offload(Shape& shape, PipelineLayout layout, OffloadChoice choice,
                                     const Evaluated& plain);
  Result<std::optional<Evaluated>> best_offload(const Candidate& c, Shape& shape,
                                                const PipelineLayout& layout,
                                                const Evaluated& plain);
  void consider_smallest(const Candidate& c, const Evaluated& e) {
    if (!smallest_ || e.peak < smallest_->second.peak) smallest_.emplace(c, e);
  }
  std::int64_t cap() const {
    return q_.memory_cap_bytes.value_or(std::numeric_limits<std::int64_t>::max());
  }
  bool fixed_offload() const { return q_.offload.fixed.tier != OffloadTier::none; }
  // Whether a candidate's stashes may leave the rank: the planner's choice or the job's.
  bool may_offload() const { return q_.offload.choose || fixed_offload(); }
  Plan finish(const Candidate& best, const Evaluated& evaluated, bool exact, const char* why);
  std::string layout_reason(const Candidate& best, const Evaluated& evaluated) const;

  const PlanRequest& q_;
  const RankTopology& topo_;
  int n_;
  std::map<std::int64_t, BlockSums> sums_;  // by microbatch samples
  std::vector<Shape> shapes_;
  std::vector<std::vector<int>> mappings_;
  int permutations_ = 0;  // mappings_[0, permutations_) are every permutation
  int chain_ = -1;
  std::map<std::pair<int, bool>, std::vector<int>> heuristic_;  // (P, split) -> mappings_
  std::vector<Candidate> candidates_;
  // The partition with the smallest memory bound among those the bound already rejects.
  std::int64_t pruned_peak_ = std::numeric_limits<std::int64_t>::max();
  Candidate pruned_{};
  std::optional<std::pair<Candidate, Evaluated>> smallest_;  // the lowest peak, for the error
  // Why the job's own offload tier did not fit a layout (peer without a partner), and whether
  // it fit any, for the error when it fits none.
  std::optional<std::string> offload_refusal_;
  bool offload_fit_ = false;
  std::array<FamilyRecord, 2> families_;
  std::array<double, 2> unexplored_bound_ = {std::numeric_limits<double>::infinity(),
                                             std::numeric_limits<double>::infinity()};
  bool policies_exhaustive_ = true;
  int simulations_ = 0;
  std::int64_t simulated_passes_ = 0;
};

}  // namespace spw::sched::planner_detail
