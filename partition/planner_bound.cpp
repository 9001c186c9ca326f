#include "partition/planner_bound.hpp"

#include <algorithm>

namespace spw::sched {

namespace {

std::size_t index(int i) { return static_cast<std::size_t>(i); }

double transfer_s(const Link& link, std::int64_t bytes) {
  return link.latency_s + static_cast<double>(bytes) / link.bandwidth_bytes_per_s;
}

}  // namespace

namespace {

// PipeFB's facts, the same from its lists as from its closed form: every list holds one
// stash at a time (a forward list until its SS, a backward list from RS to W), and every
// B is followed by its W.
ScheduleFacts split_facts(int stages, int microbatches, bool measured) {
  ScheduleFacts f;
  f.ranks = stages;
  f.microbatches = microbatches;
  f.split = true;
  f.measured = measured;
  f.max_live.assign(index(2 * stages), 1);
  f.w_after.assign(index(2 * stages), 0);
  f.last_b_chunk.assign(index(2 * stages), 0);
  f.last_w_chunk.assign(index(2 * stages), 0);
  return f;
}

}  // namespace

ScheduleFacts schedule_facts(const Schedule& s) {
  if (s.placed()) return split_facts(s.stages(), s.microbatches, true);
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
      if (in.op == Op::forward)
        f.max_live[cell] = std::max(f.max_live[cell], ++live[index(in.chunk)]);
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
  if (name == "pipefb") return split_facts(P, m, false);
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
  // The gradient leaves before its W in every generator (schedule_builder.hpp); on one
  // rank nothing is sent and each B is followed by its W at once.
  f.fused = P == 1 && name != "zb-h1";
  if (f.fused) return f;
  if (name == "gpipe" || name == "1f1b" || name == "interleaved-1f1b") {
    // Only the last B's own W (chunk 0's, the last backward chunk) follows its gradient.
    for (int r = 0; r < P; ++r) f.w_after[index(r * v)] = 1;
  } else {
    // ZB-H1 or anything else: assume every W may come after the last B (a weaker bound).
    std::fill(f.w_after.begin(), f.w_after.end(), m);
  }
  return f;
}

namespace {

double split_lower_bound(const ScheduleFacts& f, const std::vector<StageCost>& stages,
                         const std::vector<Link>& act, const std::vector<Link>& grad,
                         double step, const std::vector<Link>& stash,
                         const std::vector<Link>& params) {
  const int P = f.ranks;
  const double m = f.microbatches;
  const auto link = [](const std::vector<Link>& links, int s) {
    return links.empty() ? Link{} : links[index(s)];
  };
  const auto bw = [&](int s) {
    return stages[index(s)].backward_input_s + stages[index(s)].backward_weight_s;
  };
  // start[s]: microbatch 0 reaches F_s; down[s]: a gradient leaving B_s reaches the end of
  // B_0's backward; up[s]: B_s can start microbatch 0's backward.
  std::vector<double> start(index(P), 0), down(index(P), 0), up(index(P), 0);
  for (int s = 1; s < P; ++s) {
    const StageCost& prev = stages[index(s - 1)];
    start[index(s)] =
        start[index(s - 1)] + prev.forward_s + transfer_s(act[index(s - 1)], prev.activation_bytes);
    down[index(s)] =
        down[index(s - 1)] + transfer_s(grad[index(s - 1)], prev.activation_bytes) + bw(s - 1);
  }
  const auto stash_s = [&](int s) {
    return transfer_s(link(stash, s), stages[index(s)].stash_bytes);
  };
  const auto back_s = [&](int s) {  // the reduce, the step, the parameters home
    return stages[index(s)].reduce_grads_s + step +
           transfer_s(link(params, s), stages[index(s)].parameter_bytes);
  };
  for (int s = P - 1; s >= 0; --s) {
    up[index(s)] = start[index(s)] + stages[index(s)].forward_s + stash_s(s);
    if (s + 1 < P)
      up[index(s)] =
          std::max(up[index(s)], up[index(s + 1)] + bw(s + 1) +
                                     transfer_s(grad[index(s)], stages[index(s)].activation_bytes));
  }
  double bound = 0, top = bw(P - 1) + stash_s(P - 1);  // from the end of F_s to W on B_{P-1}
  for (int s = P - 1; s >= 0; --s) {
    const StageCost& c = stages[index(s)];
    if (s + 1 < P)
      top += stages[index(s + 1)].forward_s + transfer_s(act[index(s)], c.activation_bytes);
    const double forwards_done = start[index(s)] + m * c.forward_s;
    bound = std::max({bound, forwards_done + top + down[index(P - 1)] + back_s(0),
                      forwards_done + stash_s(s) + bw(s) + down[index(s)] + back_s(0),
                      up[index(s)] + m * bw(s) + back_s(s)});
  }
  return bound;
}

}  // namespace

double iteration_lower_bound(const ScheduleFacts& f, const std::vector<StageCost>& stages,
                             const std::vector<Link>& act_links,
                             const std::vector<Link>& grad_links, double optimizer_step_s,
                             const std::vector<Link>& stash_links,
                             const std::vector<Link>& param_links) {
  if (f.split)
    return split_lower_bound(f, stages, act_links, grad_links, optimizer_step_s, stash_links,
                             param_links);
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
                                int rank, bool offloadable) {
  if (f.split) {
    // A forward list keeps its stash until sent; a backward list has one at a time, with
    // the backward buffers of its B.
    const StageCost& sc = stages[index(rank % f.ranks)];
    return sc.parameter_bytes + sc.stash_bytes + sc.scratch_bytes +
           (rank >= f.ranks ? sc.gradient_bytes + sc.optimizer_state_bytes +
                                  sc.workspace_bytes + sc.backward_bytes
                            : 0);
  }
  std::int64_t resident = 0, scratch = 0, stash = 0;
  for (int c = 0; c < f.chunks; ++c) {
    const StageCost& sc = stages[index(c * f.ranks + rank)];
    resident += sc.parameter_bytes + sc.gradient_bytes + sc.optimizer_state_bytes +
                sc.workspace_bytes;
    scratch = std::max(scratch, sc.scratch_bytes);
    const int live = f.max_live[index(rank * f.chunks + c)];
    stash = std::max({stash, (offloadable ? std::min(live, 1) : live) * sc.stash_bytes,
                      sc.stash_bytes + sc.backward_bytes});
  }
  return resident + scratch + stash;
}

std::int64_t memory_estimate(const ScheduleFacts& f, const std::vector<StageCost>& stages,
                             int rank, int receive_lookahead) {
  const std::int64_t m = f.microbatches;
  const auto slots = [&](std::int64_t held) {
    return std::min<std::int64_t>(m, held + receive_lookahead + 2);
  };
  if (f.split) {
    const int P = f.ranks, s = rank % P;
    const bool forward = rank < P;
    const StageCost& sc = stages[index(s)];
    const std::int64_t out = s + 1 < P ? sc.activation_bytes : 0;
    std::int64_t total = sc.parameter_bytes + sc.scratch_bytes;
    if (forward) {
      total += slots(2) * (sc.stash_bytes + out);
    } else {
      total += sc.gradient_bytes + sc.optimizer_state_bytes + sc.workspace_bytes +
               slots(1) * (sc.stash_bytes + sc.backward_bytes + out);
    }
    return std::max(total, memory_lower_bound(f, stages, rank));
  }
  const int S = f.ranks * f.chunks;
  std::int64_t total = 0, scratch = 0;
  for (int c = 0; c < f.chunks; ++c) {
    const int s = c * f.ranks + rank;
    const StageCost& sc = stages[index(s)];
    const std::int64_t out = s + 1 < S ? sc.activation_bytes : 0;
    total += sc.parameter_bytes + sc.gradient_bytes + sc.optimizer_state_bytes +
             sc.workspace_bytes +
             slots(f.max_live[index(rank * f.chunks + c)]) *
                 (sc.stash_bytes + sc.backward_bytes + 2 * out);
    scratch = std::max(scratch, sc.scratch_bytes);
  }
  return std::max(total + scratch, memory_lower_bound(f, stages, rank));
}

}  // namespace spw::sched
