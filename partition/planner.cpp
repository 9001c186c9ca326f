#include "partition/planner.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <utility>

#include "partition/generators.hpp"
#include "partition/plan_memory_hint.hpp"
#include "partition/planner_bound.hpp"
#include "partition/planner_mapping.hpp"
#include "partition/planner_split.hpp"

namespace spw::sched {

namespace {

std::size_t index(int i) { return static_cast<std::size_t>(i); }

Status bad(const std::string& message) { return error(StatusCode::invalid_argument, message); }

std::string bytes_text(std::int64_t bytes) {
  char text[48];
  std::snprintf(text, sizeof text, "%.3g GiB (%lld bytes)", static_cast<double>(bytes) / (1 << 30),
                static_cast<long long>(bytes));
  return text;
}

std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g s", s);
  return text;
}

// One point of the search space without partition and mapping.
struct Shape {
  std::string schedule;
  int P = 1, R = 1, v = 1, m = 1;
  std::int64_t samples = 1;
  const BlockSums* blocks = nullptr;
  std::unique_ptr<Schedule> generated;  // null: too large, predicted in closed form
  ScheduleFacts facts;
  bool exhaustive = false;
  std::vector<std::vector<StageRange>> partitions;
  int plain_split = -1;  // index of the mapping-independent min-max split, once found

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
};

class Search {
 public:
  explicit Search(const PlanRequest& request)
      : q_(request), topo_(request.topology), n_(static_cast<int>(request.profile.blocks.size())) {}
  Result<Plan> run();

 private:
  Status enumerate_shapes();
  void prepare_mappings();
  void add_candidates(int shape_index);
  void add_minmax_partitions(Shape& shape, int mapping, std::vector<int>& partition_of);
  PipelineLayout layout(const Shape& shape, int partition, int mapping) const;
  double bound(const Shape& shape, const PipelineLayout& layout) const;
  Result<Evaluated> evaluate(const Shape& shape, const PipelineLayout& layout, double bound);
  std::int64_t cap() const {
    return q_.memory_cap_bytes.value_or(std::numeric_limits<std::int64_t>::max());
  }
  Plan finish(const Candidate& best, const Evaluated& evaluated, bool exact, const char* why);

  const PlanRequest& q_;
  const RankTopology& topo_;
  int n_;
  std::map<std::int64_t, BlockSums> sums_;  // by microbatch samples
  std::vector<Shape> shapes_;
  std::vector<std::vector<int>> mappings_;
  int permutations_ = 0;  // mappings_[0, permutations_) are every permutation
  int chain_ = -1;
  std::map<int, int> replica_major_;  // P -> index in mappings_
  std::vector<Candidate> candidates_;
  // The partition with the smallest memory bound among those the bound already rejects.
  std::int64_t pruned_peak_ = std::numeric_limits<std::int64_t>::max();
  Candidate pruned_{};
  int simulations_ = 0;
  std::int64_t simulated_passes_ = 0;
};

Status Search::enumerate_shapes() {
  const int N = topo_.ranks;
  const std::int64_t B = q_.global_batch;
  const PlanLimits& lim = q_.limits;
  for (int P = 1; P <= N; ++P) {
    if (N % P != 0) continue;
    const int R = N / P;
    if (B % R != 0) continue;
    const std::int64_t per_replica = B / R;
    for (const std::string& name : q_.schedules) {
      const bool interleaved = name == "interleaved-1f1b";
      for (int v = interleaved ? 2 : 1; v <= (interleaved ? lim.max_chunks : 1); ++v) {
        if (static_cast<std::int64_t>(P) * v > n_) continue;
        for (int m = 1; m <= lim.max_microbatches && m <= per_replica; ++m) {
          if (per_replica % m != 0 || (interleaved && m % P != 0)) continue;
          Shape s;
          s.schedule = name;
          s.P = P, s.R = R, s.v = v, s.m = m;
          s.samples = per_replica / m;
          auto [it, fresh] = sums_.try_emplace(s.samples);
          if (fresh) it->second = scale_blocks(q_.profile, s.samples);
          s.blocks = &it->second;
          if (static_cast<std::int64_t>(P) * v * m <= lim.max_simulated_passes) {
            SPW_ASSIGN_OR_RETURN(Schedule generated, make_schedule(name, {P, m, v, R > 1}));
            s.generated = std::make_unique<Schedule>(std::move(generated));
            s.facts = schedule_facts(*s.generated);
          } else {
            s.facts = estimated_facts(name, P, v, m);
          }
          shapes_.push_back(std::move(s));
        }
      }
    }
  }
  if (shapes_.empty())
    return bad("planner: no pipeline shape fits: the global batch " + std::to_string(B) +
               " must be divisible by the number of replicas, schedules must be non-empty, "
               "and the model needs at least one block per stage");
  return Status::success();
}

void Search::prepare_mappings() {
  const int N = topo_.ranks;
  std::int64_t count = 1;
  for (int i = 2; i <= N && count <= q_.limits.exhaustive_candidates; ++i) count *= i;
  if (count <= q_.limits.exhaustive_candidates) {
    std::vector<int> p(index(N));
    for (int i = 0; i < N; ++i) p[index(i)] = i;
    do mappings_.push_back(p);
    while (std::next_permutation(p.begin(), p.end()));
    permutations_ = static_cast<int>(mappings_.size());
  }
  chain_ = static_cast<int>(mappings_.size());
  mappings_.push_back(bandwidth_chain(topo_));
}

PipelineLayout Search::layout(const Shape& s, int partition, int mapping) const {
  PipelineLayout l;
  l.schedule = s.schedule;
  l.pipeline_ranks = s.P, l.replicas = s.R, l.chunks = s.v, l.microbatches = s.m;
  l.microbatch_samples = s.samples;
  l.stages = s.partitions[index(partition)];
  l.world_rank = mappings_[index(mapping)];
  return l;
}

double Search::bound(const Shape& s, const PipelineLayout& l) const {
  const std::vector<StageCost> stages = stage_costs(*s.blocks, topo_, l);
  const double step = optimizer_step_s(*s.blocks, l);
  const int S = s.P * s.v;
  std::vector<Link> act(index(S - 1)), grad(index(S - 1));
  double worst = 0;
  for (int j = 0; j < (s.P > 1 ? s.R : 1); ++j) {
    if (s.P > 1)
      for (int st = 0; st + 1 < S; ++st) {
        const int from = l.world_rank_of(j, st % s.P), to = l.world_rank_of(j, (st + 1) % s.P);
        act[index(st)] = topo_.link(from, to);
        grad[index(st)] = topo_.link(to, from);
      }
    worst = std::max(worst, iteration_lower_bound(s.facts, stages, act, grad, step));
  }
  return worst;
}

// Partitions from the min-max search for one mapping: one minimising the bound's per-rank
// chain (start + m * work + reduce), one minimising the plain stage time (the classic
// balance), both under the memory cap with each chunk given an equal share of it.
void Search::add_minmax_partitions(Shape& s, int mapping, std::vector<int>& partition_of) {
  const BlockSums& b = *s.blocks;
  const int P = s.P, R = s.R, v = s.v;
  const double m = s.m;
  std::vector<Ring> rings;
  for (int p = 0; p < P; ++p) {
    std::vector<int> ring;
    for (int j = 0; j < R; ++j) ring.push_back(mappings_[index(mapping)][index(j * P + p)]);
    rings.emplace_back(topo_, ring);
  }
  const auto work = [&](int a, int z) {
    return b.forward[index(z + 1)] - b.forward[index(a)] + b.backward_input[index(z + 1)] -
           b.backward_input[index(a)] + b.backward_weight[index(z + 1)] -
           b.backward_weight[index(a)];
  };
  const auto before = [&](int a) {
    return b.forward[index(a)] + b.backward_input[index(a)] +
           (s.facts.fused ? b.backward_weight[index(a)] : 0);
  };
  const auto reduce = [&](int st, int a, int z) {
    return rings[index(st % P)].seconds(b.gradient[index(z + 1)] - b.gradient[index(a)]);
  };
  const std::int64_t share = cap() / v;
  const auto fits = [&](int st, int a, int z) {
    const int live = s.facts.max_live[index((st % P) * v + st / P)];
    return b.resident_bytes({a, z}) + live * (b.stash[index(z + 1)] - b.stash[index(a)]) <= share;
  };
  const auto chain = [&](int st, int a, int z) {
    return before(a) + m * v * work(a, z) + reduce(st, a, z);
  };
  const auto plain = [&](int, int a, int z) { return work(a, z); };
  const auto keep = [&](std::vector<StageRange> found) {
    if (found.empty()) return -1;
    const auto same = std::find(s.partitions.begin(), s.partitions.end(), found);
    const int at = static_cast<int>(same - s.partitions.begin());
    if (same == s.partitions.end()) s.partitions.push_back(std::move(found));
    if (std::find(partition_of.begin(), partition_of.end(), at) == partition_of.end())
      partition_of.push_back(at);
    return at;
  };
  keep(min_max_partition(n_, P * v, chain, fits, 32));
  // The plain split does not depend on the mapping: search it once per shape.
  if (s.plain_split == -1) s.plain_split = keep(min_max_partition(n_, P * v, plain, fits, 32));
  if (s.plain_split == -1) {
    // Nothing fits: keep the balanced split without the cap as the shape's smallest-peak
    // witness, so the error can say how far off the cap is.
    s.plain_split = -2;
    std::vector<StageRange> witness =
        min_max_partition(n_, P * v, plain, [](int, int, int) { return true; }, 32);
    std::vector<StageCost> stages;
    for (const StageRange& r : witness) stages.push_back(b.stage(r));
    std::int64_t peak = 0;
    for (int r = 0; r < P; ++r) peak = std::max(peak, memory_lower_bound(s.facts, stages, r));
    if (!witness.empty() && peak < pruned_peak_) {
      pruned_peak_ = peak;
      s.partitions.push_back(std::move(witness));
      pruned_ = {0, static_cast<int>(&s - shapes_.data()), static_cast<int>(s.partitions.size()) - 1,
                 mapping};
    }
  }
  if (s.plain_split >= 0 &&
      std::find(partition_of.begin(), partition_of.end(), s.plain_split) == partition_of.end())
    partition_of.push_back(s.plain_split);
}

void Search::add_candidates(int shape_index) {
  Shape& s = shapes_[index(shape_index)];
  const std::int64_t limit = q_.limits.exhaustive_candidates;
  const int S = s.P * s.v;
  const std::int64_t partitions = count_partitions(n_, S, limit);
  std::vector<int> heuristic{chain_};
  if (s.P > 1 && s.R > 1) {
    auto [it, fresh] = replica_major_.try_emplace(s.P, static_cast<int>(mappings_.size()));
    if (fresh) mappings_.push_back(replicas_along_chain(mappings_[index(chain_)], s.P));
    heuristic.push_back(it->second);
  }
  std::vector<int> maps;
  const bool all_maps = permutations_ > 0 && partitions * permutations_ <= limit;
  if (all_maps)
    for (int i = 0; i < permutations_; ++i) maps.push_back(i);
  else
    maps = heuristic;
  // pairs[i] = (partition, mapping) to consider.
  std::vector<std::pair<int, int>> pairs;
  if (partitions * static_cast<std::int64_t>(maps.size()) <= limit) {
    s.exhaustive = all_maps;
    s.partitions = all_partitions(n_, S, limit);
    for (int p = 0; p < static_cast<int>(s.partitions.size()); ++p)
      for (int map : maps) pairs.emplace_back(p, map);
  } else {
    if (permutations_ > 0 && permutations_ <= 120) {
      maps.clear();
      for (int i = 0; i < permutations_; ++i) maps.push_back(i);
    }
    for (int map : maps) {
      std::vector<int> found;
      add_minmax_partitions(s, map, found);
      for (int p : found) pairs.emplace_back(p, map);
    }
  }
  // The memory bound does not depend on the mapping: reject a partition once.
  std::vector<int> fits(s.partitions.size(), -1);
  for (const auto& [p, map] : pairs) {
    if (fits[index(p)] < 0) {
      std::vector<StageCost> stages;
      for (const StageRange& r : s.partitions[index(p)]) stages.push_back(s.blocks->stage(r));
      std::int64_t peak = 0;
      for (int r = 0; r < s.P; ++r) peak = std::max(peak, memory_lower_bound(s.facts, stages, r));
      fits[index(p)] = peak <= cap() ? 1 : 0;
      if (!fits[index(p)] && peak < pruned_peak_) {
        pruned_peak_ = peak;
        pruned_ = {0, shape_index, p, map};
      }
    }
    if (!fits[index(p)]) continue;
    candidates_.push_back({bound(s, layout(s, p, map)), shape_index, p, map});
  }
}

Result<Evaluated> Search::evaluate(const Shape& s, const PipelineLayout& l, double at_least) {
  Evaluated e;
  if (s.generated) {
    ++simulations_;
    simulated_passes_ += static_cast<std::int64_t>(s.P) * s.v * s.m;
    SPW_ASSIGN_OR_RETURN(e.prediction, predict(*s.generated, *s.blocks, topo_, l));
  } else {
    // Closed form: the bound is the prediction (exact for equal stages and free links).
    const std::vector<StageCost> stages = stage_costs(*s.blocks, topo_, l);
    double busy = 0;
    for (const StageCost& c : stages)
      busy += s.m * (c.forward_s + c.backward_input_s + c.backward_weight_s);
    busy += s.P * optimizer_step_s(*s.blocks, l);
    e.prediction.iteration_s = at_least;
    e.prediction.bubble_fraction = at_least > 0 ? 1 - busy / (s.P * at_least) : 0;
    for (int r = 0; r < s.P; ++r)
      e.prediction.peak_memory_bytes.push_back(memory_estimate(s.facts, stages, r));
  }
  e.peak = *std::max_element(e.prediction.peak_memory_bytes.begin(),
                             e.prediction.peak_memory_bytes.end());
  return e;
}

Result<Plan> Search::run() {
  SPW_TRY(enumerate_shapes());
  prepare_mappings();
  bool exhaustive = true;
  for (int i = 0; i < static_cast<int>(shapes_.size()); ++i) {
    add_candidates(i);
    exhaustive = exhaustive && shapes_[index(i)].exhaustive && shapes_[index(i)].generated;
  }
  // Among equal bounds the simpler layout comes first (fewer chunks, fewer microbatches), so
  // a tie in simulated time goes to the plan with less to go wrong.
  std::stable_sort(candidates_.begin(), candidates_.end(),
                   [this](const Candidate& a, const Candidate& b) {
                     if (a.bound != b.bound) return a.bound < b.bound;
                     const Shape& sa = shapes_[index(a.shape)];
                     const Shape& sb = shapes_[index(b.shape)];
                     return std::pair(sa.v, sa.m) < std::pair(sb.v, sb.m);
                   });

  std::optional<std::pair<Candidate, Evaluated>> best;
  std::optional<std::pair<Candidate, Evaluated>> smallest;  // the lowest peak, for the error
  bool closed_form = false, budget = false;
  for (const Candidate& c : candidates_) {
    // A bound at or above the best time cannot win (1e-12: the bound sums in another order).
    if (best && c.bound * (1 - 1e-12) >= best->second.prediction.iteration_s) break;
    const Shape& s = shapes_[index(c.shape)];
    if (s.generated && simulated_passes_ >= q_.limits.simulation_budget) {
      budget = true;
      break;
    }
    SPW_ASSIGN_OR_RETURN(Evaluated e, evaluate(s, layout(s, c.partition, c.mapping), c.bound));
    closed_form = closed_form || !s.generated;
    if (!smallest || e.peak < smallest->second.peak) smallest.emplace(c, e);
    if (e.peak > cap()) continue;
    if (!best || e.prediction.iteration_s < best->second.prediction.iteration_s) best.emplace(c, e);
  }
  if (best) {
    const char* why = budget        ? "approximate: the simulation budget ran out"
                      : closed_form ? "approximate: shapes too large to simulate were predicted "
                                      "by the closed-form bound"
                      : !exhaustive ? "approximate: partitions or mappings were not searched "
                                      "exhaustively"
                                    : "exact over the search space";
    return finish(best->first, best->second, exhaustive && !closed_form && !budget, why);
  }

  // The candidate the memory bound rejected with the smallest bound may still peak below
  // every simulated one: the smallest cap that fits is the lower of the two.
  if (pruned_peak_ < std::numeric_limits<std::int64_t>::max()) {
    const Shape& s = shapes_[index(pruned_.shape)];
    const PipelineLayout l = layout(s, pruned_.partition, pruned_.mapping);
    SPW_ASSIGN_OR_RETURN(Evaluated e, evaluate(s, l, bound(s, l)));
    if (!smallest || e.peak < smallest->second.peak) smallest.emplace(pruned_, e);
  }
  std::string found = "no candidate was evaluated";
  if (smallest) {
    const auto& peaks = smallest->second.prediction.peak_memory_bytes;
    const auto rank = std::max_element(peaks.begin(), peaks.end()) - peaks.begin();
    const Shape& s = shapes_[index(smallest->first.shape)];
    // What the rank holds whatever the schedule (its stages' parameters, gradients and
    // optimizer state) against what comes and goes with microbatches.
    const PipelineLayout l = layout(s, smallest->first.partition, smallest->first.mapping);
    std::int64_t resident = 0;
    for (int st = static_cast<int>(rank); st < s.P * s.v; st += s.P)
      resident += s.blocks->resident_bytes(l.stages[index(st)]);
    const std::int64_t moving = smallest->second.peak - resident;
    found = "the smallest peak found is " + bytes_text(smallest->second.peak) +
            " on pipeline rank " + std::to_string(rank) + " (" + s.name() +
            "), the smallest cap known to fit; " +
            (resident >= moving
                 ? "parameters, gradients and optimizer state dominate it (" + bytes_text(resident) +
                       "; stashes and transfer buffers " + bytes_text(moving) + ")"
                 : "activation stashes and transfer buffers dominate it (" + bytes_text(moving) +
                       "; parameters, gradients and optimizer state " + bytes_text(resident) + ")");
  }
  return error(StatusCode::memory_cap,
               "planner: no plan keeps every rank within the memory cap of " + bytes_text(cap()) +
                   ": " + found +
                   "; use more ranks, smaller microbatches (a larger max_microbatches or global "
                   "batch), a larger cap, or offload activation stashes");
}

Plan Search::finish(const Candidate& c, const Evaluated& e, bool exact, const char* why) {
  const Shape& s = shapes_[index(c.shape)];
  Plan plan;
  static_cast<PipelineLayout&>(plan) = layout(s, c.partition, c.mapping);
  plan.iteration_s = e.prediction.iteration_s;
  plan.bubble_fraction = e.prediction.bubble_fraction;
  plan.peak_memory_bytes = e.prediction.peak_memory_bytes;
  plan.simulated = s.generated != nullptr;
  plan.exact = exact;
  plan.candidates = static_cast<std::int64_t>(candidates_.size());
  // No mapping beats free links and the fastest ring (the simulator is monotone in costs).
  if (s.generated) {
    auto ideal = predict(*s.generated, *s.blocks, topo_, plan, /*ideal=*/true);
    ++simulations_;
    plan.mapping_lower_bound_s = ideal.ok() ? ideal->iteration_s : 0;
  } else {
    const int S = s.P * s.v;
    plan.mapping_lower_bound_s =
        iteration_lower_bound(s.facts, stage_costs(*s.blocks, topo_, plan, /*ideal=*/true),
                              std::vector<Link>(index(S - 1)), std::vector<Link>(index(S - 1)),
                              optimizer_step_s(*s.blocks, plan));
  }
  plan.simulations = simulations_;

  std::string stages;
  for (std::size_t i = 0; i < plan.stages.size(); ++i)
    stages += (i ? " | " : "") + std::to_string(plan.stages[i].first) + "-" +
              std::to_string(plan.stages[i].last);
  const auto peak = std::max_element(plan.peak_memory_bytes.begin(), plan.peak_memory_bytes.end());
  char numbers[256];
  std::snprintf(numbers, sizeof numbers, "bubble %.1f%%; no mapping of ranks is more than %.1f%% faster",
                100 * plan.bubble_fraction,
                plan.mapping_lower_bound_s > 0
                    ? 100 * (plan.iteration_s / plan.mapping_lower_bound_s - 1)
                    : 0.0);
  plan.explanation =
      s.name() + ", " + std::to_string(s.samples) + " samples per microbatch\n" +
      "stages (blocks): " + stages + "\n" + "iteration " + seconds_text(plan.iteration_s) +
      (plan.simulated ? " (simulated)" : " (closed-form bound: too large to simulate)") + ", " +
      numbers + "\n" + "peak " + bytes_text(*peak) + " on pipeline rank " +
      std::to_string(peak - plan.peak_memory_bytes.begin()) +
      (q_.memory_cap_bytes ? " of a " + bytes_text(*q_.memory_cap_bytes) + " cap" : "") + "\n" +
      std::to_string(plan.candidates) + " candidates, " + std::to_string(plan.simulations) +
      " simulations; " + why;
  if (!q_.memory_cap_bytes) {
    const std::string warning = node_memory_warning(plan, plan.peak_memory_bytes, topo_);
    if (!warning.empty()) plan.explanation += "\n" + warning;
  }
  return plan;
}

}  // namespace

Result<Plan> make_plan(const PlanRequest& request) {
  SPW_TRY(check_profile(request.profile));
  SPW_TRY(check_topology(request.topology));
  if (request.global_batch < 1)
    return bad("planner: global_batch = " + std::to_string(request.global_batch) +
               " must be >= 1 (samples per iteration over all replicas)");
  if (request.memory_cap_bytes && *request.memory_cap_bytes < 1)
    return bad("planner: memory_cap_bytes = " + std::to_string(*request.memory_cap_bytes) +
               " must be >= 1 (or unset for no cap)");
  const PlanLimits& lim = request.limits;
  if (lim.max_microbatches < 1 || lim.max_chunks < 1 || lim.exhaustive_candidates < 1 ||
      lim.max_simulated_passes < 1 || lim.simulation_budget < 1)
    return bad("planner: every limit must be >= 1 (max_microbatches " +
               std::to_string(lim.max_microbatches) + ", max_chunks " +
               std::to_string(lim.max_chunks) + ", exhaustive_candidates " +
               std::to_string(lim.exhaustive_candidates) + ", max_simulated_passes " +
               std::to_string(lim.max_simulated_passes) + ", simulation_budget " +
               std::to_string(lim.simulation_budget) + ")");
  const auto known = schedule_names();
  if (request.schedules.empty()) return bad("planner: no schedules allowed; give at least one");
  for (const std::string& name : request.schedules)
    if (std::find(known.begin(), known.end(), name) == known.end())
      return bad("planner: unknown schedule '" + name +
                 "' (known: gpipe, 1f1b, interleaved-1f1b, zb-h1)");
  if (std::find(request.schedules.begin(), request.schedules.end(), "pipefb") !=
      request.schedules.end())
    return error(StatusCode::unsupported, "planner: the planner does not model pipefb yet");
  return Search(request).run();
}

}  // namespace spw::sched
