#include "kernels/ops/attention.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>

#include "kernels/blas.hpp"
#include "kernels/numa_allocator.hpp"
#include "kernels/op_timer.hpp"
#include "kernels/threading.hpp"
#include "kernels/ops/attention_softmax.hpp"
#include "kernels/ops/attention_tiled.hpp"

namespace spw::ops {

namespace {

using attention_detail::softmax_backward_row;
using attention_detail::softmax_row;

// Query rows are processed in blocks so that each block's scores stop at its last row: the
// masked upper triangle is computed only inside the diagonal blocks. 32 rows is one BLIS
// micro-tile on AVX-512 and measured fastest (against 48, 64, 96, 128) at seq 128 and 256:
// smaller blocks waste fewer masked flops, larger ones amortise more per-call overhead.
constexpr std::int64_t kRowBlock = 32;

// Score rows are padded to whole cache lines, plus one line so that a power-of-two sequence
// does not put every row of a block in the same cache sets.
std::int64_t score_stride(std::int64_t seq) { return (seq + 15) / 16 * 16 + 16; }

// Each thread's scratch starts on its own page: no false sharing, and first-touched by the
// thread that uses it.
std::size_t page_floats(std::size_t floats) {
  constexpr std::size_t kPageFloats = 4096 / sizeof(float);
  return (floats + kPageFloats - 1) / kPageFloats * kPageFloats;
}

struct Dims {
  std::int64_t batch, seq, heads, d, hd;
};

std::string dims_text(std::int64_t batch, std::int64_t seq, std::int64_t heads) {
  return "batch " + std::to_string(batch) + ", seq " + std::to_string(seq) + ", heads " +
         std::to_string(heads);
}

Result<Dims> check_dims(const char* op, const Tensor& qkv, std::int64_t batch, std::int64_t seq,
                        std::int64_t heads) {
  if (batch <= 0 || seq <= 0 || heads <= 0) {
    return error(StatusCode::invalid_argument,
                 std::string(op) + ": " + dims_text(batch, seq, heads) + " must all be positive");
  }
  const std::int64_t rows = batch * seq;
  const std::int64_t cols = qkv.shape().cols();
  if (qkv.rank() < 2 || qkv.shape().rows() != rows || cols <= 0 || cols % 3 != 0 ||
      (cols / 3) % heads != 0) {
    return error(StatusCode::shape_mismatch,
                 std::string(op) + ": qkv " + qkv.shape().to_string() + " does not fit " +
                     dims_text(batch, seq, heads) + ": expected [" + std::to_string(rows) +
                     ", 3*d] with d divisible by heads");
  }
  const std::int64_t d = cols / 3;
  return Dims{batch, seq, heads, d, d / heads};
}

Status check_matrix(const char* op, const char* name, const Tensor& t, std::int64_t rows,
                    std::int64_t cols, const Tensor& qkv) {
  if (t.rank() < 2 || t.shape().rows() != rows || t.shape().cols() != cols) {
    return error(StatusCode::shape_mismatch,
                 std::string(op) + ": " + name + " " + t.shape().to_string() +
                     " does not fit qkv " + qkv.shape().to_string() + ": expected " +
                     Shape{rows, cols}.to_string());
  }
  return Status::success();
}

Status check_lse(const char* op, const Tensor& lse, const Dims& dims) {
  const Shape want{dims.batch, dims.heads, dims.seq};
  if (!(lse.shape() == want)) {
    return error(StatusCode::shape_mismatch,
                 std::string(op) + ": lse " + lse.shape().to_string() + " does not fit " +
                     dims_text(dims.batch, dims.seq, dims.heads) + ": expected " +
                     want.to_string());
  }
  return Status::success();
}

Status check_data(const char* op, const char* name, const Tensor& t) {
  if (t.data() == nullptr) {
    return error(StatusCode::invalid_argument,
                 std::string(op) + ": " + name + " " + t.shape().to_string() + " has no data");
  }
  return Status::success();
}

// Outputs are written while inputs are still being read by other (batch, head) pairs, so an
// output sharing memory with an input would make the result depend on the schedule.
Status check_disjoint(const char* op, const char* out_name, const Tensor& out,
                      const char* in_name, const Tensor& in) {
  const auto* out_begin = reinterpret_cast<const unsigned char*>(out.data());
  const auto* in_begin = reinterpret_cast<const unsigned char*>(in.data());
  const bool overlap = out_begin < in_begin + in.bytes() && in_begin < out_begin + out.bytes();
  if (overlap) {
    return error(StatusCode::invalid_argument,
                 std::string(op) + ": " + out_name + " " + out.shape().to_string() +
                     " overlaps " + in_name + " " + in.shape().to_string() +
                     "; outputs must not alias inputs");
  }
  return Status::success();
}

int team_size(const Dims& dims) {
  const std::int64_t pairs = dims.batch * dims.heads;
  return static_cast<int>(std::clamp<std::int64_t>(compute_threads(), 1, pairs));
}

// The pairs of one thread: a contiguous run, so that it knows which pair comes next (and
// prefetches it, attention_detail::NextRows). Which thread computes a pair does not change
// its arithmetic.
struct PairRange {
  std::int64_t begin, end;
};

PairRange thread_pairs(std::int64_t pairs, int thread, int threads) {
  return {pairs * thread / threads, pairs * (thread + 1) / threads};
}

// Per-thread scratch, slices of a buffer the calling thread keeps from call to call. Mapping
// and first-touching fresh pages on every call made a pipeline microbatch of one gpt-s
// sequence (seq 128, d 256, 8 heads, one thread) 1.5x as slow in the forward (94 against
// 61 us) and 1.7x in the backward (232 against 135 us; bench_kernels, medians, 2026-11-28).
// Each slice starts on a page, so the thread that computes on it first touches it.
struct Scratch {
  float* base = nullptr;
  std::size_t per_thread = 0;
  float* of_thread(int thread) const {
    return base + per_thread * static_cast<std::size_t>(thread);
  }
};

Result<Scratch> make_scratch(int threads, std::size_t floats_per_thread) {
  thread_local ScratchBuffer kept;
  Scratch scratch;
  scratch.per_thread = page_floats(floats_per_thread);
  SPW_ASSIGN_OR_RETURN(void* memory,
                       kept.reserve(scratch.per_thread * static_cast<std::size_t>(threads) *
                                    sizeof(float)));
  scratch.base = static_cast<float*>(memory);
  return scratch;
}

attention_detail::PairView pair_view(const Dims& dims, const float* qkv, std::int64_t b,
                                    std::int64_t h) {
  attention_detail::PairView view;
  view.seq = dims.seq;
  view.hd = dims.hd;
  view.ld_qkv = 3 * dims.d;
  view.ld_out = dims.d;
  view.q = qkv + b * dims.seq * view.ld_qkv + h * dims.hd;
  view.k = view.q + dims.d;
  view.v = view.q + 2 * dims.d;
  return view;
}

void forward_pair(const Dims& dims, const float* qkv, float* y, float* lse, std::int64_t b,
                  std::int64_t h, float* scores) {
  const std::int64_t seq = dims.seq, d = dims.d, hd = dims.hd;
  const std::int64_t ld_qkv = 3 * d;
  const std::int64_t ld_s = score_stride(seq);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float* q = qkv + b * seq * ld_qkv + h * hd;
  const float* k = q + d;
  const float* v = q + 2 * d;
  float* out = y + b * seq * d + h * hd;
  float* lse_row = lse + (b * dims.heads + h) * seq;

  for (std::int64_t i0 = 0; i0 < seq; i0 += kRowBlock) {
    const std::int64_t i1 = std::min(i0 + kRowBlock, seq);
    const std::int64_t m = i1 - i0;
    blas::sgemm(blas::Op::none, blas::Op::transpose, m, i1, hd, scale, q + i0 * ld_qkv, ld_qkv,
                k, ld_qkv, 0.0f, scores, ld_s, 1);
    for (std::int64_t r = 0; r < m; ++r) {
      lse_row[i0 + r] = softmax_row(scores + r * ld_s, i0 + r + 1, i1);
    }
    blas::sgemm(blas::Op::none, blas::Op::none, m, hd, i1, 1.0f, scores, ld_s, v, ld_qkv, 0.0f,
                out + i0 * d, d, 1);
  }
}

void backward_pair(const Dims& dims, const float* dy, const float* qkv, const float* y,
                   const float* lse, float* dqkv, std::int64_t b, std::int64_t h, float* probs,
                   float* grads) {
  const std::int64_t seq = dims.seq, d = dims.d, hd = dims.hd;
  const std::int64_t ld_qkv = 3 * d;
  const std::int64_t ld_s = score_stride(seq);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float* q = qkv + b * seq * ld_qkv + h * hd;
  const float* k = q + d;
  const float* v = q + 2 * d;
  const float* out = y + b * seq * d + h * hd;
  const float* d_out = dy + b * seq * d + h * hd;
  const float* lse_row = lse + (b * dims.heads + h) * seq;
  float* dq = dqkv + b * seq * ld_qkv + h * hd;
  float* dk = dq + d;
  float* dv = dq + 2 * d;

  // Row blocks: P and dS of the lower triangle, and dQ, which needs only a block's own rows.
  for (std::int64_t i0 = 0; i0 < seq; i0 += kRowBlock) {
    const std::int64_t i1 = std::min(i0 + kRowBlock, seq);
    const std::int64_t m = i1 - i0;
    float* p = probs + i0 * ld_s;
    float* g = grads + i0 * ld_s;
    blas::sgemm(blas::Op::none, blas::Op::transpose, m, i1, hd, scale, q + i0 * ld_qkv, ld_qkv,
                k, ld_qkv, 0.0f, p, ld_s, 1);
    blas::sgemm(blas::Op::none, blas::Op::transpose, m, i1, hd, 1.0f, d_out + i0 * d, d, v,
                ld_qkv, 0.0f, g, ld_s, 1);
    for (std::int64_t r = 0; r < m; ++r) {
      const std::int64_t i = i0 + r;
      softmax_backward_row(p + r * ld_s, g + r * ld_s, i + 1, i1, lse_row[i], d_out + i * d,
                           out + i * d, hd);
    }
    blas::sgemm(blas::Op::none, blas::Op::none, m, hd, i1, scale, g, ld_s, k, ld_qkv, 0.0f,
                dq + i0 * ld_qkv, ld_qkv, 1);
  }
  // Column blocks: key j is attended by queries j..seq-1 only, so each block of dK and dV is
  // one product over the rows from the block's first query down, written once.
  for (std::int64_t j0 = 0; j0 < seq; j0 += kRowBlock) {
    const std::int64_t j1 = std::min(j0 + kRowBlock, seq);
    const std::int64_t n = j1 - j0;
    const std::int64_t rows = seq - j0;
    blas::sgemm(blas::Op::transpose, blas::Op::none, n, hd, rows, scale, grads + j0 * ld_s + j0,
                ld_s, q + j0 * ld_qkv, ld_qkv, 0.0f, dk + j0 * ld_qkv, ld_qkv, 1);
    blas::sgemm(blas::Op::transpose, blas::Op::none, n, hd, rows, 1.0f, probs + j0 * ld_s + j0,
                ld_s, d_out + j0 * d, d, 0.0f, dv + j0 * ld_qkv, ld_qkv, 1);
  }
}

}  // namespace

Status attention_forward(const Tensor& qkv, std::int64_t batch, std::int64_t seq,
                         std::int64_t heads, Tensor& y, Tensor& lse) {
  const OpTimer timer(KernelOp::attention_forward);
  constexpr const char* kOp = "attention_forward";
  SPW_ASSIGN_OR_RETURN(const Dims dims, check_dims(kOp, qkv, batch, seq, heads));
  SPW_TRY(check_matrix(kOp, "y", y, batch * seq, dims.d, qkv));
  SPW_TRY(check_lse(kOp, lse, dims));
  SPW_TRY(check_data(kOp, "qkv", qkv));
  SPW_TRY(check_data(kOp, "y", y));
  SPW_TRY(check_data(kOp, "lse", lse));
  SPW_TRY(check_disjoint(kOp, "y", y, "qkv", qkv));
  SPW_TRY(check_disjoint(kOp, "lse", lse, "qkv", qkv));
  SPW_TRY(check_disjoint(kOp, "lse", lse, "y", y));

  const int threads = team_size(dims);
  const bool tiled = attention_detail::tiled_attention_fits(dims.hd);
  const auto ld_s = static_cast<std::size_t>(score_stride(seq));
  SPW_ASSIGN_OR_RETURN(
      const Scratch scratch,
      make_scratch(threads,
                   tiled ? attention_detail::tiled_forward_scratch(seq, dims.hd)
                         : static_cast<std::size_t>(std::min(kRowBlock, seq)) * ld_s));

  const std::int64_t pairs = batch * heads;
  const float* qkv_data = qkv.data();
  float* y_data = y.data();
  float* lse_data = lse.data();
  // Each (batch, head) pair is computed whole by one thread (register tiles or
  // single-threaded BLIS), so its arithmetic does not depend on the schedule or the team size.
#pragma omp parallel num_threads(threads)
  {
    const int thread = omp_get_thread_num();
    float* scores = scratch.of_thread(thread);
    const PairRange range = thread_pairs(pairs, thread, threads);
    for (std::int64_t pair = range.begin; pair < range.end; ++pair) {
      const std::int64_t b = pair / heads, h = pair % heads;
      if (tiled) {
        const attention_detail::PairView view = pair_view(dims, qkv_data, b, h);
        attention_detail::NextRows next;
        if (pair + 1 < range.end) {
          const std::int64_t nb = (pair + 1) / heads, nh = (pair + 1) % heads;
          const attention_detail::PairView nv = pair_view(dims, qkv_data, nb, nh);
          next.add(nv.q, nv.ld_qkv, false);
          next.add(nv.k, nv.ld_qkv, false);
          next.add(nv.v, nv.ld_qkv, false);
          next.add(y_data + nb * seq * dims.d + nh * dims.hd, dims.d, true);
        }
        attention_detail::tiled_forward_pair(view, y_data + b * seq * dims.d + h * dims.hd,
                                             lse_data + pair * seq, scores,
                                             next.matrices > 0 ? &next : nullptr);
      } else {
        forward_pair(dims, qkv_data, y_data, lse_data, b, h, scores);
      }
    }
  }
  return Status::success();
}

Status attention_backward(const Tensor& dy, const Tensor& qkv, const Tensor& y,
                          const Tensor& lse, std::int64_t batch, std::int64_t seq,
                          std::int64_t heads, Tensor& dqkv) {
  const OpTimer timer(KernelOp::attention_backward);
  constexpr const char* kOp = "attention_backward";
  SPW_ASSIGN_OR_RETURN(const Dims dims, check_dims(kOp, qkv, batch, seq, heads));
  SPW_TRY(check_matrix(kOp, "dy", dy, batch * seq, dims.d, qkv));
  SPW_TRY(check_matrix(kOp, "y", y, batch * seq, dims.d, qkv));
  SPW_TRY(check_lse(kOp, lse, dims));
  SPW_TRY(check_matrix(kOp, "dqkv", dqkv, batch * seq, 3 * dims.d, qkv));
  SPW_TRY(check_data(kOp, "dy", dy));
  SPW_TRY(check_data(kOp, "qkv", qkv));
  SPW_TRY(check_data(kOp, "y", y));
  SPW_TRY(check_data(kOp, "lse", lse));
  SPW_TRY(check_data(kOp, "dqkv", dqkv));
  SPW_TRY(check_disjoint(kOp, "dqkv", dqkv, "dy", dy));
  SPW_TRY(check_disjoint(kOp, "dqkv", dqkv, "qkv", qkv));
  SPW_TRY(check_disjoint(kOp, "dqkv", dqkv, "y", y));
  SPW_TRY(check_disjoint(kOp, "dqkv", dqkv, "lse", lse));

  const int threads = team_size(dims);
  const bool tiled = attention_detail::tiled_attention_fits(dims.hd);
  const std::size_t square =
      static_cast<std::size_t>(seq) * static_cast<std::size_t>(score_stride(seq));
  // P and dS of a whole head: dK and dV read them by columns after all rows are done.
  const std::size_t half = page_floats(square);
  SPW_ASSIGN_OR_RETURN(
      const Scratch scratch,
      make_scratch(threads,
                   tiled ? attention_detail::tiled_backward_scratch(seq, dims.hd) : 2 * half));

  const std::int64_t pairs = batch * heads;
  const float* dy_data = dy.data();
  const float* qkv_data = qkv.data();
  const float* y_data = y.data();
  const float* lse_data = lse.data();
  float* dqkv_data = dqkv.data();
#pragma omp parallel num_threads(threads)
  {
    const int thread = omp_get_thread_num();
    float* probs = scratch.of_thread(thread);
    float* grads = probs + half;
    const PairRange range = thread_pairs(pairs, thread, threads);
    for (std::int64_t pair = range.begin; pair < range.end; ++pair) {
      const std::int64_t b = pair / heads, h = pair % heads;
      if (tiled) {
        const attention_detail::PairView view = pair_view(dims, qkv_data, b, h);
        const std::int64_t out = b * seq * dims.d + h * dims.hd;
        float* dq = dqkv_data + b * seq * 3 * dims.d + h * dims.hd;
        attention_detail::NextRows next;
        if (pair + 1 < range.end) {
          const std::int64_t nb = (pair + 1) / heads, nh = (pair + 1) % heads;
          const attention_detail::PairView nv = pair_view(dims, qkv_data, nb, nh);
          const std::int64_t n_out = nb * seq * dims.d + nh * dims.hd;
          float* n_dq = dqkv_data + nb * seq * 3 * dims.d + nh * dims.hd;
          next.add(nv.q, nv.ld_qkv, false);
          next.add(nv.k, nv.ld_qkv, false);
          next.add(nv.v, nv.ld_qkv, false);
          next.add(dy_data + n_out, dims.d, false);
          next.add(y_data + n_out, dims.d, false);
          next.add(n_dq, nv.ld_qkv, true);
          next.add(n_dq + dims.d, nv.ld_qkv, true);
          next.add(n_dq + 2 * dims.d, nv.ld_qkv, true);
        }
        attention_detail::tiled_backward_pair(view, dy_data + out, y_data + out,
                                              lse_data + pair * seq, dq, dq + dims.d,
                                              dq + 2 * dims.d, probs,
                                              next.matrices > 0 ? &next : nullptr);
      } else {
        backward_pair(dims, dy_data, qkv_data, y_data, lse_data, dqkv_data, b, h, probs,
                      grads);
      }
    }
  }
  return Status::success();
}

}  // namespace spw::ops
