// Memory-bound ops at [2048, d] in GB/s, each beside memcpy of as many bytes (same thread
// count; 2 threads copy halves in an OpenMP team).
//
// Bytes are compulsory traffic: every distinct element read once plus every element written
// once; a read-modify-write (the accumulated dgamma, dbeta) counts twice. With N = 2048·d,
// R = 2048 rows and floats of 4 bytes:
//   gelu_fwd          x → y                                 2N
//   gelu_fwd_tails    the same with x uniform on [-8, 4] instead of [-4, 4]: 21% of the
//                     values, and a lane of 85% of the vectors, below -5.5, where the AVX2
//                     forward adds its tables to its one polynomial (d 1024 and 4096 only)
//   gelu_bwd          dy, x → dx                            3N
//   layernorm_fwd     x, gamma, beta → y, mean, rstd        2N + 2d + 2R
//   layernorm_bwd_in  dy, x, gamma, mean, rstd → dx         3N + d + 2R
//   layernorm_bwd_w   dy, x, mean, rstd; dgamma, dbeta +=   2N + 2R + 4d
//   layernorm_bwd     both backward calls                   the sum of the two
//   embedding_fwd     tokens (int32), token table [256, d], position table [128, d] → y
//                     R + 256d + 128d + N   (batch 16 × seq 128; each table row counted once)
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "bench/kernels/bench_common.hpp"
#include "kernels/ops/activation.hpp"
#include "kernels/ops/embedding.hpp"
#include "kernels/ops/layernorm.hpp"

namespace spw::bench {

namespace {

constexpr std::int64_t kRows = 2048;
constexpr std::int64_t kBatch = 16;
constexpr std::int64_t kSeq = 128;  // kBatch * kSeq == kRows
constexpr std::int64_t kVocab = 256;  // byte-level GPT
constexpr float kEps = 1e-5f;

constexpr std::int64_t kGeluWidths[] = {256, 1024, 2048, 4096};
constexpr std::int64_t kGeluTailWidths[] = {1024, 4096};
constexpr std::int64_t kRowWidths[] = {256, 512, 1024};

std::string shape_text(std::int64_t d) { return std::to_string(kRows) + "x" + std::to_string(d); }

// Registers the op and its memcpy beside it. `body` runs the op once on operands it makes on
// first use.
void register_pair(const std::string& op, std::int64_t d, int threads, double bytes,
                   std::function<Status()> (*bind)(std::int64_t)) {
  const std::string shape = shape_text(d);
  finish(benchmark::RegisterBenchmark(
      bench_name("op", op, shape, threads).c_str(),
      [=](benchmark::State& state) {
        if (!use_threads(state, threads)) return;
        const std::function<Status()> body = bind(d);
        if (!check(state, body())) return;  // warm-up
        const LoadProbe probe;
        for (auto _ : state) {
          const Status status = body();
          if (!check(state, status)) return;
          benchmark::ClobberMemory();
        }
        probe.report(state);
        set_bytes(state, bytes);
      }));
  register_memcpy(op, shape, threads, bytes);
}

struct GeluOperands {
  Tensor x, y, dy, dx;
};

GeluOperands& gelu_operands(std::int64_t d, float lowest = -4.0f) {
  return operands<GeluOperands>("gelu/" + std::to_string(d) + "/" + std::to_string(lowest), [&] {
    auto o = std::make_unique<GeluOperands>();
    o->x = make_tensor(Shape{kRows, d});
    o->y = make_tensor(Shape{kRows, d});
    o->dy = make_tensor(Shape{kRows, d});
    o->dx = make_tensor(Shape{kRows, d});
    fill_uniform(o->x, lowest, 4.0f, 11);
    fill_uniform(o->dy, -1.0f, 1.0f, 12);
    return o;
  });
}

struct LayerNormOperands {
  Tensor x, gamma, beta, y, mean, rstd, dy, dx, dgamma, dbeta;
};

LayerNormOperands& layernorm_operands(std::int64_t d) {
  return operands<LayerNormOperands>("layernorm/" + std::to_string(d), [&] {
    auto o = std::make_unique<LayerNormOperands>();
    o->x = make_tensor(Shape{kRows, d});
    o->gamma = make_tensor(Shape{d});
    o->beta = make_tensor(Shape{d});
    o->y = make_tensor(Shape{kRows, d});
    o->mean = make_tensor(Shape{kRows});
    o->rstd = make_tensor(Shape{kRows});
    o->dy = make_tensor(Shape{kRows, d});
    o->dx = make_tensor(Shape{kRows, d});
    o->dgamma = make_tensor(Shape{d});
    o->dbeta = make_tensor(Shape{d});
    fill_uniform(o->x, -2.0f, 3.0f, 21);
    fill_uniform(o->gamma, 0.5f, 1.5f, 22);
    fill_uniform(o->beta, -0.5f, 0.5f, 23);
    fill_uniform(o->dy, -1e-3f, 1e-3f, 24);
    // mean and rstd as the forward leaves them, for the backward benchmarks.
    const Status status =
        ops::layernorm_forward(o->x, o->gamma, o->beta, kEps, o->y, o->mean, o->rstd);
    (void)status;  // a failure shows again, with its message, in the benchmark itself
    return o;
  });
}

struct EmbeddingOperands {
  std::vector<std::int32_t> tokens;
  Tensor tok, pos, y;
};

EmbeddingOperands& embedding_operands(std::int64_t d) {
  return operands<EmbeddingOperands>("embedding/" + std::to_string(d), [&] {
    auto o = std::make_unique<EmbeddingOperands>();
    o->tokens.resize(static_cast<std::size_t>(kRows));
    std::uint32_t state = 12345;
    for (auto& t : o->tokens) {
      state = state * 1664525u + 1013904223u;
      t = static_cast<std::int32_t>((state >> 8) % kVocab);
    }
    o->tok = make_tensor(Shape{kVocab, d});
    o->pos = make_tensor(Shape{kSeq, d});
    o->y = make_tensor(Shape{kRows, d});
    fill_uniform(o->tok, -0.1f, 0.1f, 31);
    fill_uniform(o->pos, -0.1f, 0.1f, 32);
    return o;
  });
}

}  // namespace

void register_elementwise_benchmarks() {
  for (int threads : kThreadCounts) {
    for (std::int64_t d : kRowWidths) {
      const double n = static_cast<double>(kRows * d);
      const double r = static_cast<double>(kRows);
      const double w = static_cast<double>(d);
      register_pair("layernorm_fwd", d, threads, 4.0 * (2 * n + 2 * w + 2 * r),
                    [](std::int64_t dd) -> std::function<Status()> {
                      LayerNormOperands* o = &layernorm_operands(dd);
                      return [o] {
                        return ops::layernorm_forward(o->x, o->gamma, o->beta, kEps, o->y,
                                                      o->mean, o->rstd);
                      };
                    });
      register_pair("layernorm_bwd_in", d, threads, 4.0 * (3 * n + w + 2 * r),
                    [](std::int64_t dd) -> std::function<Status()> {
                      LayerNormOperands* o = &layernorm_operands(dd);
                      return [o] {
                        return ops::layernorm_backward_input(o->dy, o->x, o->gamma, o->mean,
                                                             o->rstd, o->dx);
                      };
                    });
      register_pair("layernorm_bwd_w", d, threads, 4.0 * (2 * n + 2 * r + 4 * w),
                    [](std::int64_t dd) -> std::function<Status()> {
                      LayerNormOperands* o = &layernorm_operands(dd);
                      return [o] {
                        return ops::layernorm_backward_weight(o->dy, o->x, o->mean, o->rstd,
                                                              o->dgamma, o->dbeta);
                      };
                    });
      register_pair("layernorm_bwd", d, threads,
                    4.0 * ((3 * n + w + 2 * r) + (2 * n + 2 * r + 4 * w)),
                    [](std::int64_t dd) -> std::function<Status()> {
                      LayerNormOperands* o = &layernorm_operands(dd);
                      return [o] {
                        SPW_TRY(ops::layernorm_backward_input(o->dy, o->x, o->gamma, o->mean,
                                                              o->rstd, o->dx));
                        return ops::layernorm_backward_weight(o->dy, o->x, o->mean, o->rstd,
                                                              o->dgamma, o->dbeta);
                      };
                    });
      register_pair("embedding_fwd", d, threads,
                    4.0 * (r + static_cast<double>(kVocab) * w +
                           static_cast<double>(kSeq) * w + n),
                    [](std::int64_t dd) -> std::function<Status()> {
                      EmbeddingOperands* o = &embedding_operands(dd);
                      return [o] {
                        return ops::embedding_forward(
                            std::span<const std::int32_t>(o->tokens), kBatch, kSeq, o->tok,
                            o->pos, o->y);
                      };
                    });
    }
    for (std::int64_t d : kGeluWidths) {
      const double n = static_cast<double>(kRows * d);
      register_pair("gelu_fwd", d, threads, 4.0 * 2 * n,
                    [](std::int64_t dd) -> std::function<Status()> {
                      GeluOperands* o = &gelu_operands(dd);
                      return [o] { return ops::gelu_forward(o->x, o->y); };
                    });
      register_pair("gelu_bwd", d, threads, 4.0 * 3 * n,
                    [](std::int64_t dd) -> std::function<Status()> {
                      GeluOperands* o = &gelu_operands(dd);
                      return [o] { return ops::gelu_backward(o->dy, o->x, o->dx); };
                    });
    }
    for (std::int64_t d : kGeluTailWidths) {
      register_pair("gelu_fwd_tails", d, threads, 4.0 * 2 * static_cast<double>(kRows * d),
                    [](std::int64_t dd) -> std::function<Status()> {
                      GeluOperands* o = &gelu_operands(dd, -8.0f);
                      return [o] { return ops::gelu_forward(o->x, o->y); };
                    });
    }
  }
}

}  // namespace spw::bench
