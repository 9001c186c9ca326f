// Causal multi-head attention, forward and backward, at the two GPT shapes of the examples:
// gpt-s (batch 16, seq 128, d 256, 8 heads) and gpt-m (batch 8, seq 256, d 512, 8 heads),
// whole batches and a pipeline microbatch of one sequence, where a call's fixed costs show.
//
// GFLOP/s counts only the unmasked half: P = T(T+1)/2 (query, key) pairs per sequence and
// head, each costing 2·hd flops per product, summed over heads (H·hd = d):
//   forward  = 2 products (Q·Kᵀ, P·V)                      = 4·B·d·P
//   backward = 4 products (dO·Vᵀ, Pᵀ·dO, dS·K, dSᵀ·Q)      = 8·B·d·P
// The backward's recomputation of Q·Kᵀ, the softmax and its exp are not counted. Multiply by
// 2T/(T+1) for the dense convention that counts the masked half too.
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

#include "bench/kernels/bench_common.hpp"
#include "kernels/ops/attention.hpp"

namespace spw::bench {

namespace {

struct AttentionShape {
  std::int64_t batch, seq, d, heads;
};

constexpr AttentionShape kShapes[] = {
    {16, 128, 256, 8}, {8, 256, 512, 8}, {1, 128, 256, 8}, {1, 256, 512, 8}};

struct AttentionOperands {
  Tensor qkv, y, lse, dy, dqkv;
};

std::string shape_text(const AttentionShape& s) {
  // snprintf rather than string concatenation, which trips GCC 12's -Wrestrict.
  char text[96];
  std::snprintf(text, sizeof text, "b%lld_s%lld_d%lld_h%lld", static_cast<long long>(s.batch),
                static_cast<long long>(s.seq), static_cast<long long>(s.d),
                static_cast<long long>(s.heads));
  return text;
}

AttentionOperands& attention_operands(const AttentionShape& s) {
  return operands<AttentionOperands>("attention/" + shape_text(s), [&] {
    auto o = std::make_unique<AttentionOperands>();
    const std::int64_t rows = s.batch * s.seq;
    o->qkv = make_tensor(Shape{rows, 3 * s.d});
    o->y = make_tensor(Shape{rows, s.d});
    o->lse = make_tensor(Shape{s.batch, s.heads, s.seq});
    o->dy = make_tensor(Shape{rows, s.d});
    o->dqkv = make_tensor(Shape{rows, 3 * s.d});
    fill_uniform(o->qkv, -1.0f, 1.0f, 41);
    fill_uniform(o->dy, -1e-2f, 1e-2f, 42);
    // y and lse as the forward leaves them, for the backward benchmark.
    const Status status = ops::attention_forward(o->qkv, s.batch, s.seq, s.heads, o->y, o->lse);
    (void)status;  // a failure shows again, with its message, in the forward benchmark
    return o;
  });
}

}  // namespace

void register_attention_benchmarks() {
  for (int threads : kThreadCounts) {
    for (const AttentionShape& s : kShapes) {
      const double pairs = static_cast<double>(s.seq) * static_cast<double>(s.seq + 1) / 2.0;
      const double base = static_cast<double>(s.batch) * static_cast<double>(s.d) * pairs;
      register_call(
          bench_name("op", "attention_fwd", shape_text(s), threads), threads,
          [s]() -> std::function<Status()> {
            AttentionOperands* o = &attention_operands(s);
            return [o, s] {
              return ops::attention_forward(o->qkv, s.batch, s.seq, s.heads, o->y, o->lse);
            };
          },
          [base](benchmark::State& state) { set_flops(state, 4.0 * base); });
      register_call(
          bench_name("op", "attention_bwd", shape_text(s), threads), threads,
          [s]() -> std::function<Status()> {
            AttentionOperands* o = &attention_operands(s);
            return [o, s] {
              return ops::attention_backward(o->dy, o->qkv, o->y, o->lse, s.batch, s.seq,
                                             s.heads, o->dqkv);
            };
          },
          [base](benchmark::State& state) { set_flops(state, 8.0 * base); });
    }
  }
}

}  // namespace spw::bench
