#include "kernels/ops/embedding.hpp"

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/numa_allocator.hpp"
#include "kernels/op_timer.hpp"
#include "kernels/threading.hpp"

namespace spw::ops {

namespace {

// A cache line of floats: the forward asks for the next output row's lines a line at a time.
constexpr std::int64_t kLineFloats = 64 / sizeof(float);

// The forward's position rows a block at a time: 8 KiB, a sixth of a 48 KiB L1.
constexpr std::int64_t kPositionBlockFloats = 8192 / sizeof(float);

// Copies of the token table pay for themselves (allocating, zeroing and adding them up
// against reading dy a second time) from this many rows of dy per row copied; measured on a
// 2-core VM at d 256, where fresh pages are expensive.
constexpr std::int64_t kRowsPerCopiedRow = 32;

// Each thread's copy of a table starts on its own page: no false sharing, and first-touched
// by the thread that fills it.
std::size_t page_floats(std::int64_t floats) {
  constexpr std::int64_t kPageFloats = 4096 / sizeof(float);
  return static_cast<std::size_t>((floats + kPageFloats - 1) / kPageFloats * kPageFloats);
}

inline void add_row(const float* from, float* to, std::int64_t d) {
#pragma omp simd
  for (std::int64_t j = 0; j < d; ++j) to[j] += from[j];
}

// One read of the dy row for both tables.
inline void add_row_twice(const float* from, float* to_a, float* to_b, std::int64_t d) {
#pragma omp simd
  for (std::int64_t j = 0; j < d; ++j) {
    to_a[j] += from[j];
    to_b[j] += from[j];
  }
}

std::string dims_text(std::int64_t batch, std::int64_t seq) {
  return "batch " + std::to_string(batch) + ", seq " + std::to_string(seq);
}

Status check_dims(const char* op, std::span<const std::int32_t> tokens, std::int64_t batch,
                  std::int64_t seq) {
  if (batch <= 0 || seq <= 0) {
    return error(StatusCode::invalid_argument,
                 std::string(op) + ": " + dims_text(batch, seq) + " must both be positive");
  }
  if (static_cast<std::int64_t>(tokens.size()) != batch * seq) {
    return error(StatusCode::shape_mismatch,
                 std::string(op) + ": tokens [" + std::to_string(tokens.size()) +
                     "] does not fit " + dims_text(batch, seq) + ": expected [" +
                     std::to_string(batch * seq) + "]");
  }
  return Status::success();
}

// A tensor with elements but no memory (a borrowed null pointer) would crash the loops.
Status check_data(const char* op, const char* name, const Tensor& t) {
  if (t.numel() > 0 && t.data() == nullptr) {
    return error(StatusCode::invalid_argument,
                 std::string(op) + ": " + name + " " + t.shape().to_string() + " has no data");
  }
  return Status::success();
}

// A table [n, d] whose width matches `d` (any width >= 1 when d is 0, i.e. not yet known).
Status check_table(const char* op, const char* name, const Tensor& table, std::int64_t d) {
  if (table.rank() != 2 || table.dim(1) < 1 || (d > 0 && table.dim(1) != d)) {
    const std::string want = d > 0 ? "[n, " + std::to_string(d) + "]" : "[n, d] with d >= 1";
    return error(StatusCode::shape_mismatch, std::string(op) + ": " + name + " " +
                                                 table.shape().to_string() +
                                                 " is not a table " + want);
  }
  return check_data(op, name, table);
}

Status check_max_seq(const char* op, const char* name, const Tensor& table, std::int64_t seq) {
  if (seq > table.dim(0)) {
    return error(StatusCode::invalid_argument,
                 std::string(op) + ": seq " + std::to_string(seq) + " exceeds max_seq " +
                     std::to_string(table.dim(0)) + " of " + name + " " +
                     table.shape().to_string());
  }
  return Status::success();
}

// [batch*seq, d] or [batch, seq, d].
Status check_rows(const char* op, const char* name, const Tensor& t, std::int64_t batch,
                  std::int64_t seq, std::int64_t d) {
  const bool fits = t.shape() == Shape{batch * seq, d} || t.shape() == Shape{batch, seq, d};
  if (!fits) {
    return error(StatusCode::shape_mismatch,
                 std::string(op) + ": " + name + " " + t.shape().to_string() + " does not fit " +
                     dims_text(batch, seq) + ", d " + std::to_string(d) + ": expected " +
                     Shape{batch * seq, d}.to_string() + " or " +
                     Shape{batch, seq, d}.to_string());
  }
  return check_data(op, name, t);
}

Status check_ids(const char* op, std::span<const std::int32_t> tokens, const char* name,
                 const Tensor& table) {
  const std::int64_t vocab = table.dim(0);
  const std::int32_t* ids = tokens.data();
  const std::int64_t n = static_cast<std::int64_t>(tokens.size());
  // A vectorised range check first; the scalar search for the culprit runs only on failure.
  std::int32_t lo = 0;
  std::int32_t hi = 0;
#pragma omp simd reduction(min : lo) reduction(max : hi)
  for (std::int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, ids[i]);
    hi = std::max(hi, ids[i]);
  }
  if (lo >= 0 && hi < vocab) return Status::success();
  for (std::int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return error(StatusCode::invalid_argument,
                   std::string(op) + ": token id " + std::to_string(ids[i]) + " at index " +
                       std::to_string(i) + " is out of range [0, " + std::to_string(vocab) +
                       ") of " + name + " " + table.shape().to_string());
    }
  }
  return Status::success();
}

}  // namespace

Status embedding_forward(std::span<const std::int32_t> tokens, std::int64_t batch,
                         std::int64_t seq, const Tensor& token_table,
                         const Tensor& position_table, Tensor& y) {
  const OpTimer timer(KernelOp::embedding_forward);
  constexpr const char* kOp = "embedding_forward";
  SPW_TRY(check_dims(kOp, tokens, batch, seq));
  SPW_TRY(check_table(kOp, "token_table", token_table, 0));
  const std::int64_t d = token_table.dim(1);
  SPW_TRY(check_table(kOp, "position_table", position_table, d));
  SPW_TRY(check_max_seq(kOp, "position_table", position_table, seq));
  SPW_TRY(check_rows(kOp, "y", y, batch, seq, d));
  SPW_TRY(check_ids(kOp, tokens, "token_table", token_table));

  const std::int32_t* ids = tokens.data();
  const float* tok = token_table.data();
  const float* pos = position_table.data();
  float* yp = y.data();

  // Each thread owns a range of positions (as in the backward) and takes them in blocks
  // whose position rows fill kPositionBlockFloats, so that they stay in L1; for each
  // sequence it writes the block's rows, which lie next to each other in y. A token row is
  // read from L2 or beyond for every row written whatever the order (the table is too big
  // for L1 and the rows come in random order); the blocks keep the position rows out of that
  // traffic while the stores run in contiguous stretches. Each row also asks for the next
  // row's lines for writing (prefetchw), a line for each line it writes: where a stretch ends
  // the next row lies seq rows on, which no hardware prefetcher follows, and even within a
  // stretch the stores waited for their lines. On the Xeon (Emerald Rapids, 2 cores, 2 MiB
  // L2 a core), bench_kernels, medians of 6 runs alternated (2026-11-29), against one
  // position at a time (its row read once per batch) with the same prefetch: [2048, 256] on
  // two threads 49 -> 55% of memcpy, on one 73 -> 77%, [2048, 512] on two 71 -> 74%, d 1024
  // unchanged. Standalone, blocks of 4 KiB did about as well, 16 and 32 KiB worse; copying
  // the token table's column slabs into L1 and writing a line of each row at a time ran at
  // 28-38% at d 256 on two threads; sorting a block's rows by token, to read each token row
  // once per block, 47-49%.
#pragma omp parallel num_threads(compute_threads())
  {
    const std::int64_t team = omp_get_num_threads();
    const std::int64_t thread = omp_get_thread_num();
    const std::int64_t t_begin = seq * thread / team;
    const std::int64_t t_end = seq * (thread + 1) / team;
    const std::int64_t block = std::max<std::int64_t>(1, kPositionBlockFloats / d);
    for (std::int64_t t0 = t_begin; t0 < t_end; t0 += block) {
      const std::int64_t t1 = std::min(t0 + block, t_end);
      for (std::int64_t b = 0; b < batch; ++b) {
        for (std::int64_t t = t0; t < t1; ++t) {
          const std::int64_t i = b * seq + t;
          const float* tr = tok + static_cast<std::int64_t>(ids[i]) * d;
          const float* pr = pos + t * d;
          float* yr = yp + i * d;
          const bool last_of_thread = b + 1 == batch && t + 1 == t_end;
          if (d % kLineFloats != 0 || last_of_thread) {
#pragma omp simd
            for (std::int64_t j = 0; j < d; ++j) yr[j] = tr[j] + pr[j];
            continue;
          }
          // The row written next: the block's next, else the next sequence's first in the
          // block, else the next block's first (in the first sequence).
          const std::int64_t next = t + 1 < t1      ? i + 1
                                    : b + 1 < batch ? (b + 1) * seq + t0
                                                    : t1;
          const float* ahead = yp + next * d;
          for (std::int64_t j = 0; j < d; j += kLineFloats) {
            __builtin_prefetch(ahead + j, 1, 3);
#pragma omp simd
            for (std::int64_t k = j; k < j + kLineFloats; ++k) yr[k] = tr[k] + pr[k];
          }
        }
      }
    }
  }
  return Status::success();
}

Status embedding_backward_weight(std::span<const std::int32_t> tokens, std::int64_t batch,
                                 std::int64_t seq, const Tensor& dy, Tensor& dtoken_table,
                                 Tensor& dposition_table) {
  const OpTimer timer(KernelOp::embedding_backward_weight);
  constexpr const char* kOp = "embedding_backward_weight";
  SPW_TRY(check_dims(kOp, tokens, batch, seq));
  SPW_TRY(check_table(kOp, "dtoken_table", dtoken_table, 0));
  const std::int64_t d = dtoken_table.dim(1);
  SPW_TRY(check_table(kOp, "dposition_table", dposition_table, d));
  SPW_TRY(check_max_seq(kOp, "dposition_table", dposition_table, seq));
  SPW_TRY(check_rows(kOp, "dy", dy, batch, seq, d));
  SPW_TRY(check_ids(kOp, tokens, "dtoken_table", dtoken_table));

  const std::int64_t rows = batch * seq;
  const std::int64_t vocab = dtoken_table.dim(0);
  const int threads = compute_threads();
  const std::int32_t* ids = tokens.data();
  const float* dyp = dy.data();
  float* dtok = dtoken_table.data();
  float* dpos = dposition_table.data();

  // Rows that share a token or a position would race on its table row. Positions are owned
  // by threads: a thread adds all rows of its positions, batch by batch, streaming
  // contiguous rows. Tokens can repeat anywhere. With many rows, thread 0 scatters into
  // dtoken_table and every other thread into its own zeroed copy, added in thread order at
  // the end: one pass over dy. Otherwise threads own ranges of token ids, each scanning every
  // id and adding the rows of its own: dy is read twice (the second time mostly from cache at
  // these sizes) but nothing is allocated, which here costs more than the second read.
  const std::int64_t copies = threads - 1;
  const bool use_copies = copies * vocab * kRowsPerCopiedRow <= rows;
  const std::size_t copy_floats = page_floats(vocab * d);
  std::unique_ptr<Allocation> scratch;
  if (use_copies && copies > 0) {
    SPW_ASSIGN_OR_RETURN(
        scratch, allocate(copy_floats * static_cast<std::size_t>(copies) * sizeof(float),
                          MemoryCategory::workspace, MemoryPlacement::local(), FirstTouch::none));
  }
  auto copy_of = [&](std::int64_t thread) {
    return thread == 0 ? dtok
                       : static_cast<float*>(scratch->data()) + copy_floats * (thread - 1);
  };

#pragma omp parallel num_threads(threads)
  {
    const std::int64_t team = omp_get_num_threads();
    const std::int64_t thread = omp_get_thread_num();
    const std::int64_t t_begin = seq * thread / team;
    const std::int64_t t_end = seq * (thread + 1) / team;
    if (use_copies) {
      float* mine = copy_of(thread);
      if (thread > 0) std::fill_n(mine, vocab * d, 0.0f);
      for (std::int64_t b = 0; b < batch; ++b) {
        for (std::int64_t t = t_begin; t < t_end; ++t) {
          const std::int64_t i = b * seq + t;
          add_row_twice(dyp + i * d, mine + ids[i] * d, dpos + t * d, d);
        }
      }
      if (team > 1) {
#pragma omp barrier
#pragma omp for schedule(static)
        for (std::int64_t v = 0; v < vocab; ++v) {
          for (std::int64_t k = 1; k < team; ++k) add_row(copy_of(k) + v * d, dtok + v * d, d);
        }
      }
    } else {
      for (std::int64_t b = 0; b < batch; ++b) {
        for (std::int64_t t = t_begin; t < t_end; ++t) {
          add_row(dyp + (b * seq + t) * d, dpos + t * d, d);
        }
      }
      const std::int64_t v_begin = vocab * thread / team;
      const std::int64_t v_end = vocab * (thread + 1) / team;
      for (std::int64_t i = 0; i < rows; ++i) {
        if (ids[i] >= v_begin && ids[i] < v_end) add_row(dyp + i * d, dtok + ids[i] * d, d);
      }
    }
  }
  return Status::success();
}

}  // namespace spw::ops
