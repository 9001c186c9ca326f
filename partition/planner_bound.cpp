#include "partition/planner_bound.hpp"

#include <algorithm>

namespace spw::sched {

namespace {

std::size_t index(int i) { return static_cast<std::size_t>(i); }

double transfer_s(const Link& link, std::int64_t bytes) {
  return link.latency_s + static_cast<double>(bytes) / link.bandwidth_bytes_per_s;
}

}  // namespace

ScheduleFacts schedule_facts(const Schedule& s) {
  ScheduleFacts f;
  f.ranks = s.ranks;
  f.chunks = s.chunks;
  f.microbatches = s.microbatches;
  const auto cells = index(s.ranks * s.chunks);
  f.max_live.assign(cells, 0);
  f.w_after.assign(cells, 0);
  f.last_b_chunk.assign(index(s.ranks), 0);
  f.last_w_chunk.assign(index(s.ranks), 0);
  for (const auto& list : s.lists)
    for (std::size_t i = 0; i < list.size(); ++i)
      if (list[i].op == Op::backward_input &&
          (i + 1 == list.size() ||
           list[i + 1] != Instruction::backward_weight(list[i].mb, list[i].chunk)))
        f.fused = false;
  for (int r = 0; r < s.ranks; ++r) {
    const auto& list = s.lists[index(r)];
    std::vector<int> live(index(s.chunks), 0);
    std::size_t last_b = 0;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const Instruction& in = list[i];
      const std::size_t cell = index(r * s.chunks + in.chunk);
      if (in.op == Op::forward) f.max_live[cell] = std::max(f.max_live[cell], ++live[index(in.chunk)]);
      if (in.op == Op::backward_weight) {
        --live[index(in.chunk)];
        f.last_w_chunk[index(r)] = in.chunk;
      }
      if (in.op == Op::backward_input) {
        last_b = i;
        f.last_b_chunk[index(r)] = in.chunk;
      }
    }
    // Fused: the W right after the last B runs before its gradient leaves.
    for (std::size_t i = last_b + (f.fused ? 2 : 1); i < list.size(); ++i)
      if (list[i].op == Op::backward_weight) ++f.w_after[index(r * s.chunks + list[i].chunk)];
  }
  return f;
}

ScheduleFacts estimated_facts(std::string_view name, int P, int v, int m) {
  ScheduleFacts f;
  f.ranks = P;
  f.chunks = v;
  f.microbatches = m;
  f.measured = false;
  f.max_live.assign(index(P * v), m);
  f.w_after.assign(index(P * v), 0);
  f.last_b_chunk.assign(index(P), 0);
  f.last_w_chunk.assign(index(P), 0);
  for (int r = 0; r < P; ++r) {
    int* live = &f.max_live[index(r * v)];
    if (name == "1f1b") {
      live[0] = std::min(P - r, m);
    } else if (name == "zb-h1") {
      live[0] = std::min(P, m);
    } else if (name == "interleaved-1f1b") {
      // Warm-up forwards plus one, dealt to the chunks in groups of P.
      const int in_flight = std::min(2 * (P - r - 1) + (v - 1) * P + 1, m * v);
      const int cycles = in_flight / (P * v), rest = in_flight % (P * v);
      for (int c = 0; c < v; ++c)
        live[c] = std::min(m, cycles * P + std::clamp(rest - c * P, 0, P));
    }
  }
  if (name != "gpipe" && name != "1f1b" && name != "interleaved-1f1b") {
    // ZB-H1 or anything else: assume every W may come after the last B (a weaker bound).
    f.fused = false;
    std::fill(f.w_after.begin(), f.w_after.end(), m);
  }
  return f;
}

double iteration_lower_bound(const ScheduleFacts& f, const std::vector<StageCost>& stages,
                             const std::vector<Link>& act_links,
                             const std::vector<Link>& grad_links, double optimizer_step_s) {
  const int P = f.ranks, v = f.chunks, S = P * v;
  const double m = f.microbatches;
  // start[s]: microbatch 0's input reaches stage s; down[s]: a gradient leaving stage s
  // reaches the end of stage 0's backward.
  std::vector<double> start(index(S), 0), down(index(S), 0);
  for (int s = 1; s < S; ++s) {
    const StageCost& prev = stages[index(s - 1)];
    start[index(s)] = start[index(s - 1)] + prev.forward_s +
                      (P > 1 ? transfer_s(act_links[index(s - 1)], prev.activation_bytes) : 0);
    down[index(s)] = down[index(s - 1)] + prev.backward_input_s +
                     (f.fused ? prev.backward_weight_s : 0) +
                     (P > 1 ? transfer_s(grad_links[index(s - 1)], prev.activation_bytes) : 0);
  }
  const double last_w0 = f.fused ? 0 : stages[0].backward_weight_s;
  const StageCost& last = stages[index(S - 1)];
  double bound = start[index(S - 1)] + last.forward_s + last.backward_input_s +
                 (f.fused ? last.backward_weight_s : 0) + down[index(S - 1)] + last_w0 +
                 optimizer_step_s;
  for (int r = 0; r < P; ++r) {
    double work = 0, after = 0;
    for (int c = 0; c < v; ++c) {
      const StageCost& sc = stages[index(c * P + r)];
      work += m * (sc.forward_s + sc.backward_input_s + sc.backward_weight_s);
      after += f.w_after[index(r * v + c)] * sc.backward_weight_s;
    }
    const double reduce = stages[index(f.last_w_chunk[index(r)] * P + r)].reduce_grads_s;
    const int s_last_b = f.last_b_chunk[index(r)] * P + r;
    bound = std::max({bound, start[index(r)] + work + reduce + optimizer_step_s,
                      start[index(r)] + work - after + down[index(s_last_b)] + last_w0 +
                          optimizer_step_s});
  }
  return bound;
}

std::int64_t memory_lower_bound(const ScheduleFacts& f, const std::vector<StageCost>& stages,
                                int rank) {
  std::int64_t resident = 0, stash = 0;
  for (int c = 0; c < f.chunks; ++c) {
    const StageCost& sc = stages[index(c * f.ranks + rank)];
    resident += sc.parameter_bytes + sc.gradient_bytes + sc.optimizer_state_bytes;
    stash = std::max(stash, f.max_live[index(rank * f.chunks + c)] * sc.stash_bytes);
  }
  return resident + stash;
}

std::int64_t memory_estimate(const ScheduleFacts& f, const std::vector<StageCost>& stages,
                             int rank) {
  const int S = f.ranks * f.chunks;
  std::int64_t total = 0;
  for (int c = 0; c < f.chunks; ++c) {
    const int s = c * f.ranks + rank;
    const StageCost& sc = stages[index(s)];
    total += sc.parameter_bytes + sc.gradient_bytes + sc.optimizer_state_bytes +
             f.max_live[index(rank * f.chunks + c)] * sc.stash_bytes;
    if (f.ranks > 1) {
      if (s > 0) total += 2 * stages[index(s - 1)].activation_bytes;
      if (s + 1 < S) total += 2 * sc.activation_bytes;
    }
  }
  return std::max(total, memory_lower_bound(f, stages, rank));
}

}  // namespace spw::sched
