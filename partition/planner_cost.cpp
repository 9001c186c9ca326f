#include "partition/planner_cost.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "partition/generators.hpp"
#include "partition/offload_pass.hpp"
#include "partition/planner_offload.hpp"

namespace spw::sched {

namespace {

Status bad(const std::string& message) { return error(StatusCode::invalid_argument, message); }

std::size_t index(int i) { return static_cast<std::size_t>(i); }

// Replicas differ only in what their ranks' links cost: the pipeline's and the offload's.
bool same_transfers(const CostModel& a, const CostModel& b) {
  if (a.links.size() != b.links.size()) return false;
  for (std::size_t i = 0; i < a.links.size(); ++i)
    if (a.links[i].bandwidth_bytes_per_s != b.links[i].bandwidth_bytes_per_s ||
        a.links[i].latency_s != b.links[i].latency_s)
      return false;
  for (std::size_t i = 0; i < a.stages.size(); ++i)
    if (a.stages[i].offload_s != b.stages[i].offload_s ||
        a.stages[i].prefetch_s != b.stages[i].prefetch_s)
      return false;
  return true;
}

// The fastest link anywhere: no ring can do better than every step on it.
Link fastest_link(const RankTopology& topology) {
  Link best{0, std::numeric_limits<double>::infinity()};
  for (int from = 0; from < topology.ranks; ++from)
    for (int to = 0; to < topology.ranks; ++to)
      if (from != to) {
        best.bandwidth_bytes_per_s =
            std::max(best.bandwidth_bytes_per_s, topology.link(from, to).bandwidth_bytes_per_s);
        best.latency_s = std::min(best.latency_s, topology.link(from, to).latency_s);
      }
  return best;
}

}  // namespace

const char* offload_tier_name(OffloadTier tier) {
  switch (tier) {
    case OffloadTier::none:
      return "none";
    case OffloadTier::file:
      return "file";
    case OffloadTier::peer:
      return "peer";
    case OffloadTier::host:
      return "host";
  }
  return "unknown";
}

std::int64_t BlockSums::stash_bytes(StageRange r) const {
  const auto a = index(r.first), b = index(r.last + 1);
  const std::int64_t input = r.first > 0 ? activation[a - 1] : 0;
  return input + outputs[b - 1] - outputs[a] + stash[b] - stash[a];
}

std::int64_t BlockSums::scratch_bytes(StageRange r) const {
  const auto n = index(r.last - r.first + 1);
  std::size_t level = 0;
  while ((std::size_t{2} << level) <= n) ++level;
  const auto& row = scratch_max[level];
  return std::max(row[index(r.first)], row[index(r.last + 1) - (std::size_t{1} << level)]);
}

StageCost BlockSums::stage(StageRange r) const {
  const auto a = index(r.first), b = index(r.last + 1);
  StageCost c;
  c.forward_s = forward[b] - forward[a];
  c.backward_input_s = backward_input[b] - backward_input[a];
  c.backward_weight_s = backward_weight[b] - backward_weight[a];
  c.activation_bytes = activation[index(r.last)];
  // The input and the outputs inside the stage are stashed, and get gradients in B.
  const std::int64_t input = r.first > 0 ? activation[a - 1] : 0;
  const std::int64_t inner = outputs[b - 1] - outputs[a];
  c.stash_bytes = input + inner + stash[b] - stash[a];
  c.backward_bytes = input + inner + backward[b] - backward[a];
  c.workspace_bytes = workspace[b] - workspace[a];
  c.scratch_bytes = scratch_bytes(r);
  c.parameter_bytes = parameter[b] - parameter[a];
  c.gradient_bytes = gradient[b] - gradient[a];
  c.optimizer_state_bytes = optimizer_state[b] - optimizer_state[a];
  return c;
}

std::int64_t BlockSums::resident_bytes(StageRange r) const {
  const auto a = index(r.first), b = index(r.last + 1);
  return parameter[b] - parameter[a] + gradient[b] - gradient[a] + optimizer_state[b] -
         optimizer_state[a];
}

namespace {

// A block's pass times on `samples`: proportional to the profiled ones from the profiled
// microbatch up; below it, on the line through the one-sample times where those were measured.
PassSeconds pass_seconds(const BlockProfile& b, std::int64_t profiled, std::int64_t samples) {
  if (samples >= profiled || !b.one_sample || profiled <= 1) {
    const double k = static_cast<double>(samples) / static_cast<double>(profiled);
    return {b.forward_s * k, b.backward_input_s * k, b.backward_weight_s * k};
  }
  const double along = static_cast<double>(samples - 1) / static_cast<double>(profiled - 1);
  const auto between = [along](double one, double full) { return one + (full - one) * along; };
  const PassSeconds& one = *b.one_sample;
  return {between(one.forward_s, b.forward_s), between(one.backward_input_s, b.backward_input_s),
          between(one.backward_weight_s, b.backward_weight_s)};
}

}  // namespace

BlockSums scale_blocks(const ModelProfile& profile, std::int64_t samples) {
  const double k = static_cast<double>(samples) / static_cast<double>(profile.microbatch_samples);
  const auto scaled = [](std::int64_t bytes, double by) {
    return static_cast<std::int64_t>(std::llround(static_cast<double>(bytes) * by));
  };
  BlockSums s;
  s.optimizer_step_s = profile.optimizer_step_s;
  for (auto* v : {&s.forward, &s.backward_input, &s.backward_weight}) v->assign(1, 0.0);
  for (auto* v : {&s.stash, &s.parameter, &s.gradient, &s.optimizer_state, &s.backward,
                  &s.workspace, &s.outputs})
    v->assign(1, 0);
  s.scratch_max.emplace_back();
  for (const BlockProfile& b : profile.blocks) {
    const PassSeconds t = pass_seconds(b, profile.microbatch_samples, samples);
    s.forward.push_back(s.forward.back() + t.forward_s);
    s.backward_input.push_back(s.backward_input.back() + t.backward_input_s);
    s.backward_weight.push_back(s.backward_weight.back() + t.backward_weight_s);
    s.stash.push_back(s.stash.back() + scaled(b.stash_bytes, k));
    s.backward.push_back(s.backward.back() + scaled(b.backward_bytes, k));
    const std::int64_t bounded = bounded_workspace_bytes(b, profile.microbatch_samples);
    s.workspace.push_back(s.workspace.back() + scaled(b.workspace_bytes - bounded, k) +
                          bounded_workspace_bytes(b, samples));
    s.parameter.push_back(s.parameter.back() + b.parameter_bytes);
    s.gradient.push_back(s.gradient.back() + b.gradient_bytes);
    s.optimizer_state.push_back(s.optimizer_state.back() + b.optimizer_state_bytes);
    s.activation.push_back(scaled(b.activation_bytes, k));
    s.outputs.push_back(s.outputs.back() + s.activation.back());
    // Kernels' scratch mostly depends on threads, weights and sequence length: it grows by
    // what the profile saw it grow per microbatch_samples more samples, and never shrinks.
    const std::int64_t growth = b.scratch_growth_bytes.value_or(b.scratch_bytes);
    s.scratch_max[0].push_back(b.scratch_bytes + scaled(growth, std::max(k - 1, 0.0)));
  }
  for (std::size_t width = 2; width <= s.activation.size(); width *= 2) {
    const auto& below = s.scratch_max.back();
    std::vector<std::int64_t> row;
    for (std::size_t i = 0; i + width <= s.activation.size(); ++i)
      row.push_back(std::max(below[i], below[i + width / 2]));
    s.scratch_max.push_back(std::move(row));
  }
  return s;
}

Ring::Ring(const RankTopology& topology, const std::vector<int>& ranks)
    : size_(static_cast<double>(ranks.size())) {
  if (ranks.size() < 2) return;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const Link& l = topology.link(ranks[i], ranks[(i + 1) % ranks.size()]);
    // A link no slower in latency and bandwidth than a kept one never sets the step time.
    const auto covers = [](const Link& a, const Link& b) {
      return a.latency_s >= b.latency_s && a.bandwidth_bytes_per_s <= b.bandwidth_bytes_per_s;
    };
    if (std::any_of(slowest_.begin(), slowest_.end(), [&](const Link& k) { return covers(k, l); }))
      continue;
    std::erase_if(slowest_, [&](const Link& k) { return covers(l, k); });
    slowest_.push_back(l);
  }
}

double Ring::seconds(std::int64_t bytes) const {
  if (slowest_.empty()) return 0;
  double step = 0;
  for (const Link& l : slowest_)
    step = std::max(step,
                    l.latency_s + static_cast<double>(bytes) / (size_ * l.bandwidth_bytes_per_s));
  return 2 * (size_ - 1) * step;
}

Status check_layout(const ModelProfile& profile, const RankTopology& topology,
                    const PipelineLayout& l) {
  const auto field_value = [](const char* name, int value, const char* rule) {
    return bad(std::string("layout: ") + name + " = " + std::to_string(value) + " " + rule);
  };
  const auto field = [&](const char* name, int value) {
    return field_value(name, value, "must be >= 1");
  };
  if (l.pipeline_ranks < 1) return field("pipeline_ranks (P)", l.pipeline_ranks);
  if (l.replicas < 1) return field("replicas (R)", l.replicas);
  if (l.chunks < 1) return field("chunks (v)", l.chunks);
  if (l.microbatches < 1) return field("microbatches (m)", l.microbatches);
  if (l.microbatch_samples < 1)
    return bad("layout: microbatch_samples = " + std::to_string(l.microbatch_samples) +
               " must be >= 1");
  if (l.receive_lookahead < 0)
    return field_value("receive_lookahead", l.receive_lookahead, "must be >= 0");
  if (l.ranks_in_pipeline() * l.replicas != topology.ranks)
    return bad(std::string("layout: ") +
               (l.ranks_per_stage() > 1 ? "2 ranks per stage x P * R = 2 * " : "P * R = ") +
               std::to_string(l.pipeline_ranks) + " * " + std::to_string(l.replicas) +
               " must equal the topology's " + std::to_string(topology.ranks) +
               " ranks (every rank is used)");
  if (l.ranks_per_stage() > 1 && l.chunks != 1)
    return field_value("chunks (v)", l.chunks, "must be 1 under pipefb");
  const int S = l.pipeline_ranks * l.chunks;
  if (static_cast<int>(l.stages.size()) != S)
    return bad("layout: " + std::to_string(l.stages.size()) + " stage ranges for P * v = " +
               std::to_string(S) + " stages");
  int next = 0;
  for (int s = 0; s < S; ++s) {
    const StageRange r = l.stages[index(s)];
    if (r.first != next || r.last < r.first)
      return bad("layout: stage " + std::to_string(s) + " covers blocks " +
                 std::to_string(r.first) + ".." + std::to_string(r.last) +
                 "; it must be non-empty and start at block " + std::to_string(next));
    next = r.last + 1;
  }
  if (next != static_cast<int>(profile.blocks.size()))
    return bad("layout: the stages cover blocks 0.." + std::to_string(next - 1) + " of " +
               std::to_string(profile.blocks.size()));
  if (static_cast<int>(l.world_rank.size()) != topology.ranks)
    return bad("layout: world_rank has " + std::to_string(l.world_rank.size()) +
               " entries for " + std::to_string(topology.ranks) + " ranks");
  std::vector<bool> used(index(topology.ranks), false);
  for (int w : l.world_rank) {
    if (w < 0 || w >= topology.ranks || used[index(w)])
      return bad("layout: world_rank must be a permutation of 0.." +
                 std::to_string(topology.ranks - 1) + "; " + std::to_string(w) +
                 " is out of range or repeated");
    used[index(w)] = true;
  }
  const auto names = schedule_names();
  if (std::find(names.begin(), names.end(), l.schedule) == names.end())
    return error(StatusCode::not_found, "layout: unknown schedule '" + l.schedule + "'");
  return check_offload(l);
}

std::vector<StageCost> stage_costs(const BlockSums& blocks, const RankTopology& topology,
                                   const PipelineLayout& l, bool ideal) {
  const double R = l.replicas;
  const Link best = ideal ? fastest_link(topology) : Link{};
  std::vector<StageCost> out;
  out.reserve(l.stages.size());
  // rings[list]: the copies of a backward list over the replicas, which all-reduce.
  std::vector<Ring> rings;
  if (l.replicas > 1 && !ideal)
    for (int list = 0; list < l.ranks_in_pipeline(); ++list) {
      std::vector<int> ring;
      for (int j = 0; j < l.replicas; ++j) ring.push_back(l.world_rank_of(j, list));
      rings.emplace_back(topology, ring);
    }
  for (std::size_t s = 0; s < l.stages.size(); ++s) {
    StageCost sc = blocks.stage(l.stages[s]);
    if (l.replicas < 2) {
      sc.reduce_grads_s = 0;
    } else if (ideal) {
      sc.reduce_grads_s = 2 * (R - 1) *
                          (best.latency_s + static_cast<double>(sc.gradient_bytes) /
                                                (R * best.bandwidth_bytes_per_s));
    } else {
      sc.reduce_grads_s =
          rings[index(l.backward_list_of(static_cast<int>(s)))].seconds(sc.gradient_bytes);
    }
    out.push_back(sc);
  }
  return out;
}

double optimizer_step_s(const BlockSums& blocks, const PipelineLayout& l) {
  std::vector<std::int64_t> rank_params(index(l.ranks_in_pipeline()), 0);
  for (std::size_t s = 0; s < l.stages.size(); ++s)
    rank_params[index(l.backward_list_of(static_cast<int>(s)))] +=
        blocks.parameter[index(l.stages[s].last + 1)] - blocks.parameter[index(l.stages[s].first)];
  const std::int64_t total = blocks.parameter.back();
  const std::int64_t most = *std::max_element(rank_params.begin(), rank_params.end());
  // Without parameters the step is bookkeeping only: split it evenly.
  return total > 0
             ? blocks.optimizer_step_s * static_cast<double>(most) / static_cast<double>(total)
             : blocks.optimizer_step_s / l.pipeline_ranks;
}

MemoryModel memory_model(const PipelineLayout& l) {
  MemoryModel m;
  m.receive_lookahead = l.receive_lookahead;
  m.offloading = l.offload.tier != OffloadTier::none;
  return m;
}

CostModel cost_model(const BlockSums& blocks, const RankTopology& topology,
                     const PipelineLayout& l, int replica, bool ideal,
                     const OffloadBandwidth& bandwidth) {
  const int n = l.ranks_in_pipeline();
  CostModel c;
  c.stages = stage_costs(blocks, topology, l, ideal);
  c.optimizer_step_s = optimizer_step_s(blocks, l);
  c.memory = memory_model(l);
  if (!ideal && n > 1) {
    c.links.resize(index(n * n));
    for (int from = 0; from < n; ++from)
      for (int to = 0; to < n; ++to)
        if (from != to)
          c.links[index(from * n + to)] =
              topology.link(l.world_rank_of(replica, from), l.world_rank_of(replica, to));
  }
  if (!ideal) {
    add_offload_costs(c, topology, l, replica, bandwidth);
    c.copies_take_compute = bandwidth.copies_take_compute;
  }
  return c;
}

Result<CostModel> make_cost_model(const ModelProfile& profile, const RankTopology& topology,
                                  const PipelineLayout& layout, int replica,
                                  const OffloadBandwidth& bandwidth) {
  SPW_TRY(check_profile(profile));
  SPW_TRY(check_topology(topology));
  SPW_TRY(check_layout(profile, topology, layout));
  if (replica < 0 || replica >= layout.replicas)
    return bad("cost model: replica " + std::to_string(replica) + " is not in [0, " +
               std::to_string(layout.replicas) + ")");
  SPW_TRY(check_offload_bandwidth(bandwidth));
  return cost_model(scale_blocks(profile, layout.microbatch_samples), topology, layout, replica,
                    false, bandwidth);
}

Result<Prediction> predict(const Schedule& schedule, const BlockSums& blocks,
                           const RankTopology& topology, const PipelineLayout& layout,
                           bool ideal, const OffloadBandwidth& bandwidth) {
  Prediction out;
  out.peak_memory_bytes.assign(index(layout.ranks_in_pipeline()), 0);
  std::vector<CostModel> seen;
  std::vector<std::int64_t> reserved;
  for (int j = 0; j < (ideal ? 1 : layout.replicas); ++j) {
    CostModel costs = cost_model(blocks, topology, layout, j, ideal, bandwidth);
    if (std::any_of(seen.begin(), seen.end(),
                    [&](const CostModel& c) { return same_transfers(c, costs); }))
      continue;
    SPW_ASSIGN_OR_RETURN(const Simulation sim, simulate(schedule, costs));
    if (seen.empty() || sim.iteration_s > out.iteration_s) {
      out.iteration_s = sim.iteration_s;
      out.bubble_fraction = sim.bubble_fraction;
    }
    out.offload_transfer_s = std::max(out.offload_transfer_s, offload_stream_s(sim));
    if (reserved.empty() && !ideal)
      reserved = offload_reserved_bytes(layout, costs.stages, sim.max_live_stashes);
    for (std::size_t p = 0; p < out.peak_memory_bytes.size(); ++p)
      out.peak_memory_bytes[p] =
          std::max(out.peak_memory_bytes[p],
                   sim.peak_memory_bytes[p] + (reserved.empty() ? 0 : reserved[p]));
    seen.push_back(std::move(costs));
  }
  return out;
}

Result<double> mapping_lower_bound_s(const Schedule& plain_schedule, const BlockSums& blocks,
                                     const RankTopology& topology, PipelineLayout layout) {
  layout.offload = {};
  SPW_ASSIGN_OR_RETURN(const Prediction ideal,
                       predict(plain_schedule, blocks, topology, layout, /*ideal=*/true));
  return ideal.iteration_s;
}

Result<Prediction> predict(const ModelProfile& profile, const RankTopology& topology,
                           const PipelineLayout& layout, const OffloadBandwidth& bandwidth) {
  SPW_TRY(check_profile(profile));
  SPW_TRY(check_topology(topology));
  SPW_TRY(check_layout(profile, topology, layout));
  SPW_TRY(check_offload_bandwidth(bandwidth));
  SPW_ASSIGN_OR_RETURN(Schedule schedule,
                       make_schedule(layout.schedule, {layout.pipeline_ranks, layout.microbatches,
                                                       layout.chunks, layout.replicas > 1}));
  if (layout.offload.tier != OffloadTier::none) {
    SPW_ASSIGN_OR_RETURN(schedule,
                         insert_offload(schedule, {layout.offload.keep, layout.offload.lookahead}));
  }
  return predict(schedule, scale_blocks(profile, layout.microbatch_samples), topology, layout,
                 false, bandwidth);
}

}  // namespace spw::sched
