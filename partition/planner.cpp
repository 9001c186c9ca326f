#include "partition/planner.hpp"

#include "partition/planner_search.hpp"

namespace spw::sched {
namespace planner_detail {

Status Search::enumerate_shapes() {
  const int N = topo_.ranks;
  const std::int64_t B = q_.global_batch;
  const PlanLimits& lim = q_.limits;
  std::vector<std::string> names;
  if (q_.layout != LayoutChoice::pipefb)
    for (const std::string& name : q_.schedules)
      if (name != "pipefb") names.push_back(name);
  const bool listed = std::find(q_.schedules.begin(), q_.schedules.end(), "pipefb") !=
                      q_.schedules.end();
  if (q_.layout == LayoutChoice::pipefb || q_.layout == LayoutChoice::automatic || listed)
    names.emplace_back("pipefb");
  for (int P = 1; P <= N; ++P) {
    for (const std::string& name : names) {
      const bool interleaved = name == "interleaved-1f1b";
      const bool split = name == "pipefb";
      const int lists = split ? 2 * P : P;
      if (N % lists != 0) continue;
      const int R = N / lists;
      if (B % R != 0) continue;
      const std::int64_t per_replica = B / R;
      for (int v = interleaved ? 2 : 1; v <= (interleaved ? lim.max_chunks : 1); ++v) {
        if (static_cast<std::int64_t>(P) * v > n_) continue;
        for (int m = 1; m <= lim.max_microbatches && m <= per_replica; ++m) {
          if (per_replica % m != 0 || (interleaved && m % P != 0)) continue;
          Shape s;
          s.schedule = name;
          s.P = P, s.R = R, s.v = v, s.m = m;
          s.split = split;
          s.samples = per_replica / m;
          auto [it, fresh] = sums_.try_emplace(s.samples);
          if (fresh) it->second = scale_blocks(q_.profile, s.samples);
          s.blocks = &it->second;
          if (static_cast<std::int64_t>(P) * v * m <= lim.max_simulated_passes) {
            SPW_ASSIGN_OR_RETURN(Schedule generated, make_schedule(name, {P, m, v, R > 1}));
            s.generated = std::make_unique<Schedule>(std::move(generated));
            s.facts = schedule_facts(*s.generated);
            s.keep_limit = offload_keep_limit(*s.generated);
          } else {
            s.facts = estimated_facts(name, P, v, m);
          }
          ++families_[index(s.family())].shapes;
          shapes_.push_back(std::move(s));
        }
      }
    }
  }
  if (shapes_.empty())
    return bad("planner: no pipeline shape fits: the global batch " + std::to_string(B) +
               " must be divisible by the number of replicas, schedules must be non-empty, "
               "the model needs at least one block per stage" +
               (q_.layout == LayoutChoice::pipefb
                    ? ", and pipefb needs an even number of ranks per replica (2 per stage)"
                    : ""));
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

// The bandwidth chain's layouts (planner_mapping.hpp) for a shape, made once per (P, split).
std::vector<int> Search::heuristic_mappings(const Shape& s) {
  auto [it, fresh] = heuristic_.try_emplace({s.P, s.split});
  if (!fresh) return it->second;
  const std::vector<int> chain = mappings_[index(chain_)];  // a copy: mappings_ grows below
  std::vector<int>& ids = it->second;
  const auto add = [&](std::vector<int> mapping) {
    if (mapping == chain) {
      if (std::find(ids.begin(), ids.end(), chain_) == ids.end()) ids.push_back(chain_);
      return;
    }
    ids.push_back(static_cast<int>(mappings_.size()));
    mappings_.push_back(std::move(mapping));
  };
  if (s.split) {
    add(pair_stage_ranks(chain, s.P));
    if (s.R > 1) add(pair_stage_ranks(replicas_along_chain(chain, 2 * s.P), s.P));
  } else {
    ids.push_back(chain_);
    if (s.P > 1 && s.R > 1) add(replicas_along_chain(chain, s.P));
  }
  return ids;
}

PipelineLayout Search::layout(const Shape& s, int partition, int mapping) const {
  PipelineLayout l;
  l.schedule = s.schedule;
  l.pipeline_ranks = s.P, l.replicas = s.R, l.chunks = s.v, l.microbatches = s.m;
  l.microbatch_samples = s.samples;
  l.stages = s.partitions[index(partition)];
  l.world_rank = mappings_[index(mapping)];
  l.receive_lookahead = q_.receive_lookahead;
  return l;
}

double Search::bound(const Shape& s, const PipelineLayout& l) const {
  const std::vector<StageCost> stages = stage_costs(*s.blocks, topo_, l);
  const double step = optimizer_step_s(*s.blocks, l);
  const int S = s.P * s.v;
  std::vector<Link> act(index(S - 1)), grad(index(S - 1)), stash, params;
  if (s.split) stash.resize(index(S)), params.resize(index(S));
  double worst = 0;
  const bool linked = s.lists() > 1;
  for (int j = 0; j < (linked ? s.R : 1); ++j) {
    if (linked) {
      const auto world = [&](int list) { return l.world_rank_of(j, list); };
      for (int st = 0; st + 1 < S; ++st) {
        act[index(st)] = topo_.link(world(l.forward_list_of(st)), world(l.forward_list_of(st + 1)));
        grad[index(st)] =
            topo_.link(world(l.backward_list_of(st + 1)), world(l.backward_list_of(st)));
      }
      if (s.split)
        for (int st = 0; st < S; ++st) {
          stash[index(st)] = topo_.link(world(st), world(s.P + st));
          params[index(st)] = topo_.link(world(s.P + st), world(st));
        }
    }
    worst = std::max(worst, iteration_lower_bound(s.facts, stages, act, grad, step, stash, params));
  }
  return worst;
}

std::int64_t Search::memory_bound(const Shape& s, const std::vector<StageRange>& ranges,
                                  bool offloadable) const {
  std::vector<StageCost> stages;
  for (const StageRange& r : ranges) stages.push_back(s.blocks->stage(r));
  std::int64_t peak = 0;
  for (int r = 0; r < s.lists(); ++r)
    peak = std::max(peak, memory_lower_bound(s.facts, stages, r, offloadable));
  return peak;
}

// Partitions from the min-max search for one mapping: one minimising the bound's per-rank
// chain, one minimising the plain stage time (the classic balance), both under the memory
// cap with each chunk given an equal share of it; when offload may be chosen, the plain
// one again with the stashes offloaded but one.
//
// Chain: classic, start + m * v * work + reduce (start: the blocks before, whose passes a
// rank waits for). PipeFB: the larger of the forward rank's start + m * F and the backward
// rank's (every forward + the backwards after it) + m * (B + W) + reduce; both monotone in
// the range as min_max_partition needs (m >= 1 times a block outweighs it in the start).
// Plain: classic F + B + W, PipeFB max(F, B + W).
void Search::add_minmax_partitions(Shape& s, int mapping, std::vector<int>& partition_of) {
  const BlockSums& b = *s.blocks;
  const int P = s.P, R = s.R, v = s.v, n = s.lists();
  const double m = s.m;
  PipelineLayout shape_layout;
  shape_layout.schedule = s.schedule;
  shape_layout.pipeline_ranks = P;
  std::vector<Ring> rings;  // [stage % P]: the replicas' copies of its backward list
  for (int p = 0; p < P; ++p) {
    std::vector<int> ring;
    for (int j = 0; j < R; ++j)
      ring.push_back(mappings_[index(mapping)][index(j * n + shape_layout.backward_list_of(p))]);
    rings.emplace_back(topo_, ring);
  }
  const auto sum = [](const std::vector<double>& prefix, int a, int z) {
    return prefix[index(z + 1)] - prefix[index(a)];
  };
  const auto work = [&](int a, int z) {
    return sum(b.forward, a, z) + sum(b.backward_input, a, z) + sum(b.backward_weight, a, z);
  };
  const auto backward = [&](int a, int z) {
    return sum(b.backward_input, a, z) + sum(b.backward_weight, a, z);
  };
  const auto before = [&](int a) {
    return b.forward[index(a)] + b.backward_input[index(a)] +
           (s.facts.fused ? b.backward_weight[index(a)] : 0);
  };
  const auto reduce = [&](int st, int a, int z) {
    return rings[index(st % P)].seconds(b.gradient[index(z + 1)] - b.gradient[index(a)]);
  };
  const double all_forward = b.forward.back();
  const auto chain = [&](int st, int a, int z) {
    if (!s.split) return before(a) + m * v * work(a, z) + reduce(st, a, z);
    return std::max(b.forward[index(a)] + m * sum(b.forward, a, z),
                    all_forward + backward(z + 1, n_ - 1) + m * backward(a, z) + reduce(st, a, z));
  };
  const auto plain = [&](int, int a, int z) {
    return s.split ? std::max(sum(b.forward, a, z), backward(a, z)) : work(a, z);
  };
  const auto keep = [&](std::vector<StageRange> found) {
    if (found.empty()) return -1;
    const auto same = std::find(s.partitions.begin(), s.partitions.end(), found);
    const int at = static_cast<int>(same - s.partitions.begin());
    if (same == s.partitions.end()) s.partitions.push_back(std::move(found));
    if (std::find(partition_of.begin(), partition_of.end(), at) == partition_of.end())
      partition_of.push_back(at);
    return at;
  };
  const std::int64_t share = cap() / v;
  // Offloading changes nothing on PipeFB's lists, which hold one stash each.
  const int variants = may_offload() && !s.split ? 2 : 1;
  for (int offloadable = 0; offloadable < variants; ++offloadable) {
    const auto fits = [&](int st, int a, int z) {
      const int live = s.split ? 1 : s.facts.max_live[index((st % P) * v + st / P)];
      const int held = offloadable ? std::min(live, 1) : live;
      return b.resident_bytes({a, z}) + held * b.stash_bytes({a, z}) <= share;
    };
    // With offload the chain's split is left out: searching it per mapping doubled the
    // planning time of large cases, and the plain split stands for the offloading ones.
    if (!offloadable) keep(min_max_partition(n_, P * v, chain, fits, 32));
    // The plain split does not depend on the mapping: search it once per shape.
    int& plain_split = s.plain_split[index(offloadable)];
    if (plain_split == -1) {
      plain_split = keep(min_max_partition(n_, P * v, plain, fits, 32));
      if (plain_split == -1) plain_split = -2;
    }
    if (plain_split >= 0 &&
        std::find(partition_of.begin(), partition_of.end(), plain_split) == partition_of.end())
      partition_of.push_back(plain_split);
  }
  if (s.plain_split[0] == -2 && s.plain_split[index(variants - 1)] == -2) {
    // Nothing fits: keep the balanced split without the cap as the shape's smallest-peak
    // witness, so the error can say how far off the cap is.
    s.plain_split = {-3, -3};
    std::vector<StageRange> witness =
        min_max_partition(n_, P * v, plain, [](int, int, int) { return true; }, 32);
    const std::int64_t peak =
        witness.empty() ? pruned_peak_ : memory_bound(s, witness, variants > 1);
    if (!witness.empty() && peak < pruned_peak_) {
      pruned_peak_ = peak;
      s.partitions.push_back(std::move(witness));
      pruned_ = {0, static_cast<int>(&s - shapes_.data()),
                 static_cast<int>(s.partitions.size()) - 1, mapping};
    }
  }
}

void Search::add_candidates(int shape_index) {
  Shape& s = shapes_[index(shape_index)];
  const std::int64_t limit = q_.limits.exhaustive_candidates;
  const int S = s.P * s.v;
  const std::int64_t partitions = count_partitions(n_, S, limit);
  std::vector<int> maps;
  const bool all_maps = permutations_ > 0 && partitions * permutations_ <= limit;
  if (all_maps)
    for (int i = 0; i < permutations_; ++i) maps.push_back(i);
  else
    maps = heuristic_mappings(s);
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
  // The memory bound does not depend on the mapping: reject a partition once. With offload
  // to choose, only the stash a backward runs on has to be resident.
  std::vector<int> fits(s.partitions.size(), -1);
  for (const auto& [p, map] : pairs) {
    if (fits[index(p)] < 0) {
      const std::int64_t peak = memory_bound(s, s.partitions[index(p)], may_offload());
      fits[index(p)] = peak <= cap() ? 1 : 0;
      if (!fits[index(p)] && peak < pruned_peak_) {
        pruned_peak_ = peak;
        pruned_ = {0, shape_index, p, map};
      }
    }
    if (!fits[index(p)]) continue;
    candidates_.push_back({bound(s, layout(s, p, map)), shape_index, p, map});
    ++families_[index(s.family())].candidates;
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
    busy += s.P * optimizer_step_s(*s.blocks, l);  // only the ranks running backwards step
    e.prediction.iteration_s = at_least;
    e.prediction.bubble_fraction = at_least > 0 ? 1 - busy / (s.lists() * at_least) : 0;
    for (int r = 0; r < s.lists(); ++r)
      e.prediction.peak_memory_bytes.push_back(
          memory_estimate(s.facts, stages, r, l.receive_lookahead));
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
  // Among equal bounds the simpler layout comes first (one rank per stage, fewer chunks,
  // fewer microbatches), so a tie in simulated time goes to the plan with less to go wrong.
  std::stable_sort(candidates_.begin(), candidates_.end(),
                   [this](const Candidate& a, const Candidate& b) {
                     if (a.bound != b.bound) return a.bound < b.bound;
                     const Shape& sa = shapes_[index(a.shape)];
                     const Shape& sb = shapes_[index(b.shape)];
                     return std::tuple(sa.split, sa.v, sa.m) < std::tuple(sb.split, sb.v, sb.m);
                   });

  std::optional<std::pair<Candidate, Evaluated>> best;
  bool closed_form = false, budget = false;
  for (const Candidate& c : candidates_) {
    Shape& s = shapes_[index(c.shape)];
    double& unexplored = unexplored_bound_[index(s.family())];
    // A bound at or above the best time cannot win (1e-12: the bound sums in another order).
    if (best && c.bound * (1 - 1e-12) >= best->second.prediction.iteration_s) {
      unexplored = std::min(unexplored, c.bound);
      continue;
    }
    if (s.generated && simulated_passes_ >= q_.limits.simulation_budget) {
      budget = true;
      unexplored = std::min(unexplored, c.bound);
      continue;
    }
    const PipelineLayout l = layout(s, c.partition, c.mapping);
    SPW_ASSIGN_OR_RETURN(Evaluated e, evaluate(s, l, c.bound));
    closed_form = closed_form || !s.generated;
    if (fixed_offload() && s.generated) {
      PipelineLayout tried = l;
      tried.offload = q_.offload.fixed;
      if (const Status fits = check_offload(tried); !fits.ok()) {  // peer without a partner
        if (!offload_refusal_) offload_refusal_ = fits.message();
        continue;
      }
      offload_fit_ = true;
      const Evaluated plain = e;
      SPW_ASSIGN_OR_RETURN(e, simulate_offload(s, l, q_.offload.fixed, plain));
    }
    consider_smallest(c, e);
    if (e.peak > cap()) {
      // Offload is modelled on simulated shapes only, and cannot beat the time without it.
      if (!q_.offload.choose || !s.generated ||
          (best && e.prediction.iteration_s * (1 - 1e-12) >= best->second.prediction.iteration_s))
        continue;
      SPW_ASSIGN_OR_RETURN(std::optional<Evaluated> offloaded, best_offload(c, s, l, e));
      if (!offloaded) continue;
      e = *offloaded;
    }
    FamilyRecord& family = families_[index(s.family())];
    if (!family.best || e.prediction.iteration_s < family.best->second.prediction.iteration_s)
      family.best.emplace(c, e);
    if (!best || e.prediction.iteration_s < best->second.prediction.iteration_s) best.emplace(c, e);
  }
  if (best) {
    const bool exact = exhaustive && !closed_form && !budget && policies_exhaustive_;
    const char* why = budget        ? "approximate: the simulation budget ran out"
                      : closed_form ? "approximate: shapes too large to simulate were predicted "
                                      "by the closed-form bound"
                      : !exhaustive ? "approximate: partitions or mappings were not searched "
                                      "exhaustively"
                      : !policies_exhaustive_
                          ? "approximate: offload keep was bisected, not searched exhaustively"
                          : "exact over the search space";
    return finish(best->first, best->second, exact, why);
  }

  // The candidate the memory bound rejected with the smallest bound may still peak below
  // every simulated one: the smallest cap that fits is the lower of the two.
  if (pruned_peak_ < std::numeric_limits<std::int64_t>::max()) {
    Shape& s = shapes_[index(pruned_.shape)];
    const PipelineLayout l = layout(s, pruned_.partition, pruned_.mapping);
    SPW_ASSIGN_OR_RETURN(Evaluated e, evaluate(s, l, bound(s, l)));
    consider_smallest(pruned_, e);
  }
  // How far offloading every stash would get the smallest plan found without it, so the
  // error says what offload can and cannot do.
  if (smallest_ && q_.offload.choose && smallest_->second.offload.tier == OffloadTier::none) {
    const Candidate c = smallest_->first;
    const Evaluated plain = smallest_->second;
    Shape& s = shapes_[index(c.shape)];
    const PipelineLayout l = layout(s, c.partition, c.mapping);
    for (OffloadTier tier : q_.offload.tiers) {
      PipelineLayout tried = l;
      tried.offload = {tier, 0, 0};
      if (!s.generated || s.keep_limit == 0 || !check_offload(tried).ok()) continue;
      SPW_ASSIGN_OR_RETURN(Evaluated o, simulate_offload(s, l, tried.offload, plain));
      consider_smallest(c, o);
    }
  }
  if (offload_refusal_ && !offload_fit_) {
    // Said before, the planner reported a memory shortfall, of a layout the tier cannot run
    // or of none ("no candidate was evaluated").
    return error(StatusCode::invalid_argument,
                 "planner: the job's offload policy (" + offload_text(q_.offload.fixed) +
                     ") fits no layout of " + std::to_string(topo_.ranks) + " rank(s): " +
                     // check_offload speaks of "layout: ..." when a layout is given it.
                     (offload_refusal_->starts_with("layout: ") ? offload_refusal_->substr(8)
                                                                : *offload_refusal_));
  }
  std::string found = "no candidate was evaluated";
  if (smallest_) {
    const auto& peaks = smallest_->second.prediction.peak_memory_bytes;
    const auto rank = std::max_element(peaks.begin(), peaks.end()) - peaks.begin();
    const OffloadChoice& o = smallest_->second.offload;
    const Shape& s = shapes_[index(smallest_->first.shape)];
    // What the rank holds whatever the schedule (parameters of the stages it serves, and
    // gradients and optimizer state of those whose backwards it runs) against what comes
    // and goes with microbatches (stashes, activation and gradient buffers).
    const PipelineLayout l = layout(s, smallest_->first.partition, smallest_->first.mapping);
    std::int64_t resident = 0;
    for (int st = 0; st < static_cast<int>(l.stages.size()); ++st) {
      const StageRange range = l.stages[index(st)];
      if (l.backward_list_of(st) == rank)
        resident += s.blocks->resident_bytes(range);
      else if (l.forward_list_of(st) == rank)
        resident += s.blocks->stage(range).parameter_bytes;
    }
    const std::int64_t moving = smallest_->second.peak - resident;
    found =
        "the smallest peak found is " + bytes_text(smallest_->second.peak) + " on pipeline rank " +
        std::to_string(rank) + " (" + s.name() +
        (o.tier != OffloadTier::none ? ", offload " + offload_text(o) : "") +
        "), the smallest cap known to fit; " +
        (resident >= moving
             ? "parameters, gradients and optimizer state dominate it (" + bytes_text(resident) +
                   "; stashes and transfer buffers " + bytes_text(moving) + ")"
             : "activation stashes and transfer buffers dominate it (" + bytes_text(moving) +
                   "; parameters, gradients and optimizer state " + bytes_text(resident) + ")");
  }
  return error(StatusCode::memory_cap,
               std::string("planner: no plan keeps every rank within ") +
                   (q_.memory_cap_is_node_share ? "its share of its node's memory, "
                                                : "the memory cap of ") +
                   bytes_text(cap()) + ": " + found +
                   "; use more ranks, smaller microbatches (a larger max_microbatches or global "
                   "batch), " +
                   std::string(q_.memory_cap_is_node_share ? "more nodes" : "a larger cap") +
                   (q_.offload.choose ? " (offloading stashes was tried)"
                    : fixed_offload()
                        ? " (with the job's offload policy, " + offload_text(q_.offload.fixed) +
                              "; offload.tier = \"auto\" lets the planner choose)"
                        : ", or offload activation stashes"));
}

}  // namespace planner_detail

using planner_detail::bad;

Result<Plan> make_plan(const PlanRequest& request) {
  SPW_TRY(check_profile(request.profile));
  SPW_TRY(check_topology(request.topology));
  if (request.global_batch < 1)
    return bad("planner: global_batch = " + std::to_string(request.global_batch) +
               " must be >= 1 (samples per iteration over all replicas)");
  if (request.memory_cap_bytes && *request.memory_cap_bytes < 1)
    return bad("planner: memory_cap_bytes = " + std::to_string(*request.memory_cap_bytes) +
               " must be >= 1 (or unset for no cap)");
  if (request.receive_lookahead < 0)
    return bad("planner: receive_lookahead = " + std::to_string(request.receive_lookahead) +
               " must be >= 0 (receives the executor posts ahead)");
  const PlanLimits& lim = request.limits;
  if (lim.max_microbatches < 1 || lim.max_chunks < 1 || lim.exhaustive_candidates < 1 ||
      lim.max_simulated_passes < 1 || lim.simulation_budget < 1 || lim.max_lookahead < 0 ||
      lim.exhaustive_policies < 1)
    return bad("planner: every limit must be >= 1 and max_lookahead >= 0 (max_microbatches " +
               std::to_string(lim.max_microbatches) + ", max_chunks " +
               std::to_string(lim.max_chunks) + ", exhaustive_candidates " +
               std::to_string(lim.exhaustive_candidates) + ", max_simulated_passes " +
               std::to_string(lim.max_simulated_passes) + ", simulation_budget " +
               std::to_string(lim.simulation_budget) + ", max_lookahead " +
               std::to_string(lim.max_lookahead) + ", exhaustive_policies " +
               std::to_string(lim.exhaustive_policies) + ")");
  const auto known = schedule_names();
  if (request.schedules.empty() && request.layout != LayoutChoice::pipefb)
    return bad("planner: no schedules allowed; give at least one");
  for (const std::string& name : request.schedules) {
    if (std::find(known.begin(), known.end(), name) == known.end())
      return bad("planner: unknown schedule '" + name +
                 "' (known: gpipe, 1f1b, interleaved-1f1b, zb-h1, pipefb)");
    if (name == "pipefb" && request.layout == LayoutChoice::classic)
      return bad("planner: schedule 'pipefb' puts a stage on two ranks, which layout classic "
                 "forbids; drop it from the schedules or ask for layout automatic or pipefb");
  }
  const OffloadSearch& offload = request.offload;
  const auto host_unmodelled = [](const char* instead) {
    return bad(std::string("planner: the host offload tier is not modelled (the rank topology "
                           "does not say whether a rank has a second memory node): ") +
               instead);
  };
  const OffloadChoice& fixed = offload.fixed;
  if (fixed.tier != OffloadTier::none) {
    if (offload.choose)
      return bad("planner: offload.fixed and offload.choose exclude each other: either the job "
                 "gives the policy or the planner chooses it");
    if (fixed.tier == OffloadTier::host) return host_unmodelled("fix file or peer");
    if (fixed.keep < 0 || fixed.lookahead < 0)
      return bad("planner: offload.fixed keep = " + std::to_string(fixed.keep) +
                 " and lookahead = " + std::to_string(fixed.lookahead) + " must be >= 0");
  }
  if (fixed.tier == OffloadTier::file) {
    const Status bandwidth = check_offload_bandwidth(offload.bandwidth);
    if (!bandwidth.ok()) return bandwidth.with_context("planner");
  }
  if (offload.choose) {
    if (offload.tiers.empty())
      return bad("planner: offload.choose needs at least one tier to choose from (file, peer)");
    for (OffloadTier tier : offload.tiers) {
      if (tier == OffloadTier::none)
        return bad("planner: offload tiers to choose from list 'none'; the planner chooses none "
                   "by itself when everything fits: list file and/or peer");
      if (tier == OffloadTier::host) return host_unmodelled("choose among file and peer");
    }
    const Status bandwidth = check_offload_bandwidth(offload.bandwidth);
    if (!bandwidth.ok()) return bandwidth.with_context("planner");
  }
  return planner_detail::Search(request).run();
}

}  // namespace spw::sched

