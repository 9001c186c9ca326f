// Linear forward, input gradient and weight gradient at the transformer shapes of 2048 tokens,
// each beside raw bli_sgemm_ex with the same m, n, k, transposes, operands and thread count.
// The same at T = 128 ("<shape>_r128"), a pipeline microbatch of one 128-token sample, for d
// 256 and 512: there the forward copies Wᵀ where BLIS packs it slowly (kernels/ops/linear.cpp),
// so it may beat the raw product with the transpose as a stride.
//
//   proj [2048, d] x [d, d]     qkv [2048, d] x [3d, d]
//   fc1  [2048, d] x [4d, d]    fc2 [2048, 4d] x [d, 4d]        (weight [out, in])
//
//   fwd:    y  [T, out] = x · Wᵀ (+ bias)   sgemm(N, T) m = T,   n = out, k = in,  beta 0
//   bwd_in: dx [T, in]  = dy · W            sgemm(N, N) m = T,   n = in,  k = out, beta 0
//   bwd_w:  dW [out, in] += dyᵀ · x (dbias) sgemm(T, N) m = out, n = in,  k = T,   beta 1
//
// The ops run with their bias as a transformer's Linear does (forward fills y with the bias
// and has sgemm add to it; the weight gradient also sums dy's columns into dbias); the flops
// are the product's 2·m·n·k only.
#include <blis.h>

#include <string>

#include "bench/kernels/bench_common.hpp"
#include "kernels/ops/linear.hpp"

namespace spw::bench {

namespace {

constexpr std::int64_t kTokens = 2048;
constexpr std::int64_t kMicrobatchTokens = 128;
constexpr std::int64_t kMicrobatchWidths[] = {256, 512};

struct LinearShape {
  const char* name;
  std::int64_t in_mult;   // in = in_mult * d
  std::int64_t out_mult;  // out = out_mult * d
};

constexpr LinearShape kShapes[] = {
    {"proj", 1, 1}, {"qkv", 1, 3}, {"fc1", 1, 4}, {"fc2", 4, 1}};
constexpr std::int64_t kWidths[] = {256, 512, 1024};

struct LinearOperands {
  Tensor x, w, b, y, dy, dx, dw, db;
};

enum class Pass { fwd, bwd_in, bwd_w };

const char* pass_name(Pass p) {
  switch (p) {
    case Pass::fwd: return "linear_fwd";
    case Pass::bwd_in: return "linear_bwd_in";
    case Pass::bwd_w: return "linear_bwd_w";
  }
  return "?";
}

LinearOperands& linear_operands(std::int64_t tokens, std::int64_t in, std::int64_t out) {
  const std::string key =
      "linear/" + std::to_string(tokens) + "/" + std::to_string(in) + "x" + std::to_string(out);
  return operands<LinearOperands>(key, [&] {
    auto o = std::make_unique<LinearOperands>();
    o->x = make_tensor(Shape{tokens, in});
    o->w = make_tensor(Shape{out, in});
    o->b = make_tensor(Shape{out});
    o->y = make_tensor(Shape{tokens, out});
    o->dy = make_tensor(Shape{tokens, out});
    o->dx = make_tensor(Shape{tokens, in});
    o->dw = make_tensor(Shape{out, in});
    o->db = make_tensor(Shape{out});
    fill_uniform(o->x, -1.0f, 1.0f, 1);
    fill_uniform(o->w, -0.05f, 0.05f, 2);
    fill_uniform(o->b, -0.1f, 0.1f, 3);
    fill_uniform(o->dy, -1e-3f, 1e-3f, 4);
    return o;
  });
}

Status run_op(Pass pass, LinearOperands& o) {
  switch (pass) {
    case Pass::fwd: return ops::linear_forward(o.x, o.w, &o.b, o.y);
    case Pass::bwd_in: return ops::linear_backward_input(o.dy, o.w, o.dx);
    case Pass::bwd_w: return ops::linear_backward_weight(o.dy, o.x, o.dw, &o.db);
  }
  return Status::success();
}

// The same product as the op's, straight into BLIS with a per-call thread count.
void run_sgemm(Pass pass, LinearOperands& o, std::int64_t tokens, std::int64_t in,
               std::int64_t out, rntm_t* rntm) {
  float one = 1.0f;
  float zero = 0.0f;
  switch (pass) {
    case Pass::fwd:
      bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_TRANSPOSE, tokens, out, in, &one, o.x.data(), in, 1,
                   o.w.data(), in, 1, &zero, o.y.data(), out, 1, nullptr, rntm);
      return;
    case Pass::bwd_in:
      bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, tokens, in, out, &one, o.dy.data(), out,
                   1, o.w.data(), in, 1, &zero, o.dx.data(), in, 1, nullptr, rntm);
      return;
    case Pass::bwd_w:
      bli_sgemm_ex(BLIS_TRANSPOSE, BLIS_NO_TRANSPOSE, out, in, tokens, &one, o.dy.data(), out, 1,
                   o.x.data(), in, 1, &one, o.dw.data(), in, 1, nullptr, rntm);
      return;
  }
}

void register_one(const LinearShape& s, std::int64_t d, std::int64_t tokens, Pass pass,
                  int threads) {
  const std::int64_t in = s.in_mult * d;
  const std::int64_t out = s.out_mult * d;
  const double flops = 2.0 * static_cast<double>(tokens) * static_cast<double>(in) *
                       static_cast<double>(out);
  std::string shape = std::string(s.name) + "_d" + std::to_string(d);
  if (tokens != kTokens) shape += "_r" + std::to_string(tokens);

  finish(benchmark::RegisterBenchmark(
      bench_name("op", pass_name(pass), shape, threads).c_str(),
      [=](benchmark::State& state) {
        if (!use_threads(state, threads)) return;
        LinearOperands& o = linear_operands(tokens, in, out);
        if (!check(state, run_op(pass, o))) return;  // warm-up
        const LoadProbe probe;
        for (auto _ : state) {
          const Status status = run_op(pass, o);
          if (!check(state, status)) return;
          benchmark::ClobberMemory();
        }
        probe.report(state);
        set_flops(state, flops);
      }));

  finish(benchmark::RegisterBenchmark(
      bench_name("sgemm", pass_name(pass), shape, threads).c_str(),
      [=](benchmark::State& state) {
        if (!use_threads(state, threads)) return;
        LinearOperands& o = linear_operands(tokens, in, out);
        rntm_t rntm = BLIS_RNTM_INITIALIZER;
        bli_rntm_set_num_threads(threads, &rntm);
        run_sgemm(pass, o, tokens, in, out, &rntm);  // warm-up
        const LoadProbe probe;
        for (auto _ : state) {
          run_sgemm(pass, o, tokens, in, out, &rntm);
          benchmark::ClobberMemory();
        }
        probe.report(state);
        set_flops(state, flops);
      }));
}

}  // namespace

void register_gemm_benchmarks() {
  for (int threads : kThreadCounts) {
    for (std::int64_t d : kWidths) {
      for (const LinearShape& s : kShapes) {
        for (Pass pass : {Pass::fwd, Pass::bwd_in, Pass::bwd_w}) {
          register_one(s, d, kTokens, pass, threads);
        }
      }
    }
    for (std::int64_t d : kMicrobatchWidths) {
      for (const LinearShape& s : kShapes) {
        for (Pass pass : {Pass::fwd, Pass::bwd_in, Pass::bwd_w}) {
          register_one(s, d, kMicrobatchTokens, pass, threads);
        }
      }
    }
  }
}

}  // namespace spw::bench
