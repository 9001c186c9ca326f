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
//
// On one thread every op but the embedding also runs as "incache/<op>/<shape>/t1": the same
// op and width on few enough rows that its operands stay in L2, which bounds what the op
// can reach at that shape (kInCacheBytes below); summarize.py shows it as the op's ceiling.
// The embedding's ceiling is "gather/embedding_fwd/<shape>/t<threads>" instead: its token
// rows copied to the output alone (gather_token_rows below), counted as the embedding is.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "bench/kernels/bench_common.hpp"
#include "kernels/ops/activation.hpp"
#include "kernels/ops/embedding.hpp"
#include "kernels/ops/layernorm.hpp"
#include "kernels/threading.hpp"

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

// The in-cache companion of a row runs the op on [in_cache_rows(d), d] instead of [kRows, d]:
// its [rows, d] tensors take kInCacheBytes together (at least 8 rows), so that they stay in a
// Zen 3 core's 512 KiB L2 from one call to the next. No memory feeds the op faster, so its
// rate there bounds the op's at [kRows, d] on one thread, and t threads go at most t times as
// fast: the op's ceiling, whatever memcpy does. As many rows as fit, because each call also
// pays for starting up (the team, the checks, a LayerNorm's first and last rows).
constexpr std::int64_t kInCacheBytes = std::int64_t{384} << 10;

std::int64_t in_cache_rows(std::int64_t d, int tensors) {
  const std::int64_t row_bytes = d * tensors * static_cast<std::int64_t>(sizeof(float));
  return std::max<std::int64_t>(8, kInCacheBytes / row_bytes);
}

void register_op(const std::string& name, int threads, double bytes,
                 std::function<std::function<Status()>()> bind) {
  register_call(name, threads, std::move(bind),
                [bytes](benchmark::State& state) { set_bytes(state, bytes); });
}

// An op as the benchmarks see it: how many [rows, d] tensors it reads or writes (0: it has
// no in-cache companion), its compulsory bytes at [rows, d] and a call on operands of that
// shape.
struct ElementwiseOp {
  std::string name;
  int tensors;
  double (*bytes)(std::int64_t rows, std::int64_t d);
  std::function<Status()> (*bind)(std::int64_t rows, std::int64_t d);
};

// The op at [kRows, d] beside memcpy of as many bytes and, on one thread, its in-cache
// companion at the same width (kInCacheBytes above).
void register_pair(const ElementwiseOp& op, std::int64_t d, int threads) {
  const std::string shape = shape_text(d);
  const double bytes = op.bytes(kRows, d);
  register_op(bench_name("op", op.name, shape, threads), threads, bytes,
              [bind = op.bind, d] { return bind(kRows, d); });
  register_memcpy(op.name, shape, threads, bytes);
  if (threads == 1 && op.tensors > 0) {
    const std::int64_t rows = in_cache_rows(d, op.tensors);
    register_op(bench_name("incache", op.name, shape, threads), threads, op.bytes(rows, d),
                [bind = op.bind, rows, d] { return bind(rows, d); });
  }
}

struct GeluOperands {
  Tensor x, y, dy, dx;
};

GeluOperands& gelu_operands(std::int64_t rows, std::int64_t d, float lowest = -4.0f) {
  const std::string key =
      "gelu/" + std::to_string(rows) + "x" + std::to_string(d) + "/" + std::to_string(lowest);
  return operands<GeluOperands>(key, [&] {
    auto o = std::make_unique<GeluOperands>();
    o->x = make_tensor(Shape{rows, d});
    o->y = make_tensor(Shape{rows, d});
    o->dy = make_tensor(Shape{rows, d});
    o->dx = make_tensor(Shape{rows, d});
    fill_uniform(o->x, lowest, 4.0f, 11);
    fill_uniform(o->dy, -1.0f, 1.0f, 12);
    return o;
  });
}

struct LayerNormOperands {
  Tensor x, gamma, beta, y, mean, rstd, dy, dx, dgamma, dbeta;
};

LayerNormOperands& layernorm_operands(std::int64_t rows, std::int64_t d) {
  const std::string key = "layernorm/" + std::to_string(rows) + "x" + std::to_string(d);
  return operands<LayerNormOperands>(key, [&] {
    auto o = std::make_unique<LayerNormOperands>();
    o->x = make_tensor(Shape{rows, d});
    o->gamma = make_tensor(Shape{d});
    o->beta = make_tensor(Shape{d});
    o->y = make_tensor(Shape{rows, d});
    o->mean = make_tensor(Shape{rows});
    o->rstd = make_tensor(Shape{rows});
    o->dy = make_tensor(Shape{rows, d});
    o->dx = make_tensor(Shape{rows, d});
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

// The compulsory bytes of the table above, at [r, d], in floats of 4 bytes.
double floats(std::int64_t count) { return 4.0 * static_cast<double>(count); }

std::function<Status()> layernorm_fwd_call(std::int64_t rows, std::int64_t d) {
  LayerNormOperands* o = &layernorm_operands(rows, d);
  return [o] {
    return ops::layernorm_forward(o->x, o->gamma, o->beta, kEps, o->y, o->mean, o->rstd);
  };
}

std::function<Status()> layernorm_bwd_in_call(std::int64_t rows, std::int64_t d) {
  LayerNormOperands* o = &layernorm_operands(rows, d);
  return [o] {
    return ops::layernorm_backward_input(o->dy, o->x, o->gamma, o->mean, o->rstd, o->dx);
  };
}

std::function<Status()> layernorm_bwd_w_call(std::int64_t rows, std::int64_t d) {
  LayerNormOperands* o = &layernorm_operands(rows, d);
  return [o] {
    return ops::layernorm_backward_weight(o->dy, o->x, o->mean, o->rstd, o->dgamma, o->dbeta);
  };
}

std::function<Status()> layernorm_bwd_call(std::int64_t rows, std::int64_t d) {
  LayerNormOperands* o = &layernorm_operands(rows, d);
  return [o] {
    SPW_TRY(ops::layernorm_backward_input(o->dy, o->x, o->gamma, o->mean, o->rstd, o->dx));
    return ops::layernorm_backward_weight(o->dy, o->x, o->mean, o->rstd, o->dgamma, o->dbeta);
  };
}

std::function<Status()> embedding_fwd_call(std::int64_t rows, std::int64_t d) {
  (void)rows;  // always kBatch × kSeq tokens
  EmbeddingOperands* o = &embedding_operands(d);
  return [o] {
    return ops::embedding_forward(std::span<const std::int32_t>(o->tokens), kBatch, kSeq, o->tok,
                                  o->pos, o->y);
  };
}

// y[i] = token_table[tokens[i]]: the part of the embedding's work that no order of its loops
// avoids, a token row read for every output row written (the table is too big for L1 and
// the rows come in random order), without the position rows and the add. Each thread copies
// a contiguous share of the rows and asks for the next row's lines for writing as it writes
// its own, as the embedding does: the fastest gather of those tried (standalone, on the Xeon
// at [2048, 256] on two threads, 2026-11-29: 63-64% of memcpy; 57-62% without the prefetch,
// 49-52% position-major).
Status gather_token_rows(EmbeddingOperands& o) {
  const std::int64_t d = o.tok.dim(1);
  const std::int32_t* ids = o.tokens.data();
  const float* tok = o.tok.data();
  float* y = o.y.data();
  constexpr std::int64_t kLineFloats = 16;
#pragma omp parallel num_threads(compute_threads())
  {
    const std::int64_t team = omp_get_num_threads();
    const std::int64_t thread = omp_get_thread_num();
    const std::int64_t end = kRows * (thread + 1) / team;
    for (std::int64_t i = kRows * thread / team; i < end; ++i) {
      const float* from = tok + static_cast<std::int64_t>(ids[i]) * d;
      float* to = y + i * d;
      // Every benchmarked width is a whole number of lines; the last row has no next.
      const float* ahead = i + 1 < end ? to + d : to;
      for (std::int64_t j = 0; j < d; j += kLineFloats) {
        __builtin_prefetch(ahead + j, 1, 3);
#pragma omp simd
        for (std::int64_t k = j; k < j + kLineFloats; ++k) to[k] = from[k];
      }
    }
  }
  return Status::success();
}

std::function<Status()> embedding_gather_call(std::int64_t rows, std::int64_t d) {
  (void)rows;  // always kBatch × kSeq tokens
  EmbeddingOperands* o = &embedding_operands(d);
  return [o] { return gather_token_rows(*o); };
}

std::function<Status()> gelu_fwd_call(std::int64_t rows, std::int64_t d) {
  GeluOperands* o = &gelu_operands(rows, d);
  return [o] { return ops::gelu_forward(o->x, o->y); };
}

std::function<Status()> gelu_fwd_tails_call(std::int64_t rows, std::int64_t d) {
  GeluOperands* o = &gelu_operands(rows, d, -8.0f);
  return [o] { return ops::gelu_forward(o->x, o->y); };
}

std::function<Status()> gelu_bwd_call(std::int64_t rows, std::int64_t d) {
  GeluOperands* o = &gelu_operands(rows, d);
  return [o] { return ops::gelu_backward(o->dy, o->x, o->dx); };
}

double layernorm_fwd_bytes(std::int64_t r, std::int64_t d) {
  return floats(2 * r * d + 2 * d + 2 * r);
}
double layernorm_bwd_in_bytes(std::int64_t r, std::int64_t d) {
  return floats(3 * r * d + d + 2 * r);
}
double layernorm_bwd_w_bytes(std::int64_t r, std::int64_t d) {
  return floats(2 * r * d + 2 * r + 4 * d);
}
double layernorm_bwd_bytes(std::int64_t r, std::int64_t d) {
  return layernorm_bwd_in_bytes(r, d) + layernorm_bwd_w_bytes(r, d);
}
double embedding_fwd_bytes(std::int64_t r, std::int64_t d) {
  return floats(r + kVocab * d + kSeq * d + r * d);
}
double gelu_fwd_bytes(std::int64_t r, std::int64_t d) { return floats(2 * r * d); }
double gelu_bwd_bytes(std::int64_t r, std::int64_t d) { return floats(3 * r * d); }

}  // namespace

void register_elementwise_benchmarks() {
  const ElementwiseOp row_ops[] = {
      {"layernorm_fwd", 2, layernorm_fwd_bytes, layernorm_fwd_call},
      {"layernorm_bwd_in", 3, layernorm_bwd_in_bytes, layernorm_bwd_in_call},
      {"layernorm_bwd_w", 2, layernorm_bwd_w_bytes, layernorm_bwd_w_call},
      {"layernorm_bwd", 3, layernorm_bwd_bytes, layernorm_bwd_call},
  };
  // The embedding reads whole tables whatever the row count, so it has no in-cache companion.
  const ElementwiseOp embedding{"embedding_fwd", 0, embedding_fwd_bytes, embedding_fwd_call};
  const ElementwiseOp gelu_ops[] = {
      {"gelu_fwd", 2, gelu_fwd_bytes, gelu_fwd_call},
      {"gelu_bwd", 3, gelu_bwd_bytes, gelu_bwd_call},
  };
  const ElementwiseOp gelu_tails{"gelu_fwd_tails", 2, gelu_fwd_bytes, gelu_fwd_tails_call};
  for (int threads : kThreadCounts) {
    for (std::int64_t d : kRowWidths) {
      for (const ElementwiseOp& op : row_ops) register_pair(op, d, threads);
      register_pair(embedding, d, threads);
      register_op(bench_name("gather", embedding.name, shape_text(d), threads), threads,
                  embedding_fwd_bytes(kRows, d), [d] { return embedding_gather_call(kRows, d); });
    }
    for (std::int64_t d : kGeluWidths) {
      for (const ElementwiseOp& op : gelu_ops) register_pair(op, d, threads);
    }
    for (std::int64_t d : kGeluTailWidths) register_pair(gelu_tails, d, threads);
  }
}

}  // namespace spw::bench
