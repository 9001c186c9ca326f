#include "kernels/ops/layernorm.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "kernels/numa_allocator.hpp"
#include "kernels/op_timer.hpp"
#include "kernels/ops/layernorm_rows.hpp"
#include "kernels/ops/layernorm_rows_avx2.hpp"
#include "kernels/ops/write_prefetch.hpp"
#include "kernels/threading.hpp"

namespace spw::ops {

namespace {

constexpr std::int64_t kLineFloats = 64 / sizeof(float);
constexpr std::int64_t kPrefetchBytes = 2048;
// The weight gradient sums rows in groups of at least kGroupRows, so that adding up the
// groups' partials costs little next to the pass over the rows, and at most kMaxGroups, so
// that the partials (kMaxGroups rows of 2 d floats) stay small.
constexpr std::int64_t kGroupRows = 64;
constexpr std::int64_t kMaxGroups = 256;
#if defined(__AVX512F__)
// From this width on, an AVX-512 build takes the AVX2 forward (layernorm_forward says why).
constexpr std::int64_t kWideForwardFloats = 512;
#endif

// A tensor with elements but no memory (a borrowed null pointer) would crash the loops.
Status check_data(const char* op, const char* name, const Tensor& t) {
  if (t.numel() > 0 && t.data() == nullptr) {
    return error(StatusCode::invalid_argument,
                 std::string(op) + ": " + name + " " + t.shape().to_string() + " has no data");
  }
  return Status::success();
}

Status check_x(const char* op, const char* name, const Tensor& x) {
  if (x.rank() < 2 || x.shape().cols() < 1) {
    return error(StatusCode::shape_mismatch, std::string(op) + ": " + name + " " +
                                                 x.shape().to_string() +
                                                 " is not a matrix [rows, d] with d >= 1");
  }
  return check_data(op, name, x);
}

// Any rank >= 2 with x's rows and width: [batch*seq, d] and [batch, seq, d] are the same rows.
Status check_like_x(const char* op, const char* name, const Tensor& t, const Tensor& x) {
  if (t.rank() < 2 || t.shape().rows() != x.shape().rows() ||
      t.shape().cols() != x.shape().cols()) {
    return error(StatusCode::shape_mismatch,
                 std::string(op) + ": " + name + " " + t.shape().to_string() +
                     " does not fit x " + x.shape().to_string() + ": expected " +
                     Shape{x.shape().rows(), x.shape().cols()}.to_string());
  }
  return check_data(op, name, t);
}

Status check_weight(const char* op, const char* name, const Tensor& w, const Tensor& x) {
  if (!(w.shape() == Shape{x.shape().cols()})) {
    return error(StatusCode::shape_mismatch, std::string(op) + ": " + name + " " +
                                                 w.shape().to_string() + " does not fit x " +
                                                 x.shape().to_string() + ": expected [" +
                                                 std::to_string(x.shape().cols()) + "]");
  }
  return check_data(op, name, w);
}

// One value per row of x: [rows], or x's own leading dimensions.
Status check_stat(const char* op, const char* name, const Tensor& s, const Tensor& x) {
  bool fits = s.shape() == Shape{x.shape().rows()};
  if (!fits && s.rank() == x.rank() - 1) {
    fits = true;
    for (int i = 0; i < s.rank(); ++i) fits = fits && s.dim(i) == x.dim(i);
  }
  if (!fits) {
    return error(StatusCode::shape_mismatch, std::string(op) + ": " + name + " " +
                                                 s.shape().to_string() + " does not fit x " +
                                                 x.shape().to_string() + ": expected [" +
                                                 std::to_string(x.shape().rows()) + "]");
  }
  return check_data(op, name, s);
}

std::string format_float(float value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", static_cast<double>(value));
  return text;
}

}  // namespace

Status layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                         Tensor& y, Tensor& mean, Tensor& rstd) {
  const OpTimer timer(KernelOp::layernorm_forward);
  constexpr const char* kOp = "layernorm_forward";
  SPW_TRY(check_x(kOp, "x", x));
  SPW_TRY(check_weight(kOp, "gamma", gamma, x));
  SPW_TRY(check_weight(kOp, "beta", beta, x));
  SPW_TRY(check_like_x(kOp, "y", y, x));
  SPW_TRY(check_stat(kOp, "mean", mean, x));
  SPW_TRY(check_stat(kOp, "rstd", rstd, x));
  if (!(eps > 0.0f) || !std::isfinite(eps)) {
    return error(StatusCode::invalid_argument,
                 std::string(kOp) + ": eps " + format_float(eps) +
                     " must be positive and finite (a constant row would divide by zero)");
  }

  const std::int64_t rows = x.shape().rows();
  const std::int64_t d = x.shape().cols();
  const float inv_d = 1.0f / static_cast<float>(d);
  const float* xp = x.data();
  const float* g = gamma.data();
  const float* b = beta.data();
  float* yp = y.data();
  float* mp = mean.data();
  float* rp = rstd.data();

#if defined(__AVX2__) && defined(__FMA__)
  const bool prefetch_outputs = prefetch_outputs_for_write();
  // Each thread takes a contiguous range of whole blocks of `block_rows`, as schedule(static)
  // would; `forward_rows(begin, end)` runs one range.
  const auto by_blocks = [&](std::int64_t block_rows, auto forward_rows) {
    const std::int64_t blocks = (rows + block_rows - 1) / block_rows;
#pragma omp parallel num_threads(compute_threads())
    {
      const std::int64_t team = omp_get_num_threads();
      const std::int64_t thread = omp_get_thread_num();
      const std::int64_t begin = blocks * thread / team * block_rows;
      const std::int64_t end = std::min(rows, blocks * (thread + 1) / team * block_rows);
      if (end > begin) forward_rows(begin, end);
    }
  };
#endif
#if defined(__AVX512F__)
  // Rows narrower than 2 KiB: four rows of 16-float vectors at a time (layernorm_rows.hpp).
  // From 2 KiB on, the AVX2 kernel, with its loads ahead of its stores: on the Zen 5 at
  // [2048, 1024] two rows at a time ran at 65% / 74% of memcpy on 1 / 2 threads where the
  // four rows ran at 61% / 68%, and at d 512 at 79% / 84% against 76% / 85% (bench_kernels,
  // medians of 8 runs alternated, 2026-11-28, /tmp/s17/lnf*). One row at a time, its best on
  // the Zen 3, is faster again on the Zen 4: 47.5-53.6 GB/s against 33.1-38.2 at d 1024 on
  // one thread and 87-113 against 30-84 on two, 64.0-65.8 against 56.3-58.6 and 105.1-105.8
  // against 87.1-97.5 at d 512 (bench_kernels' op/layernorm_fwd rows, medians of 5 in three
  // alternated rounds of the two builds, 2026-11-30). Widths that are no multiple of 16 take
  // it too (its last vector is masked) instead of the generic loops.
  if (d % 16 == 0 && d < kWideForwardFloats) {
    by_blocks(layernorm_detail::kBlockRows, [&](std::int64_t begin, std::int64_t end) {
      if (prefetch_outputs) {
        layernorm_detail::forward_rows<true>(xp, g, b, d, begin, end, rows - 1, inv_d, eps, yp, mp,
                                             rp);
      } else {
        layernorm_detail::forward_rows<false>(xp, g, b, d, begin, end, rows - 1, inv_d, eps, yp, mp,
                                              rp);
      }
    });
    return Status::success();
  }
#endif
#if defined(__AVX2__) && defined(__FMA__)
  by_blocks(layernorm_avx2::kBlockRows, [&](std::int64_t begin, std::int64_t end) {
    if (prefetch_outputs) {
      layernorm_avx2::forward_rows<true>(xp, g, b, d, begin, end, rows - 1, inv_d, eps, yp, mp, rp);
    } else {
      layernorm_avx2::forward_rows<false>(xp, g, b, d, begin, end, rows - 1, inv_d, eps, yp, mp,
                                          rp);
    }
  });
  return Status::success();
#endif
  // While a row's statistics are reduced no new addresses reach the hardware prefetcher, so
  // the rows about 2 KiB ahead are requested explicitly (about 20% more
  // bandwidth at d 256 on a 2-core VM).
  const std::int64_t ahead =
      std::max<std::int64_t>(1, kPrefetchBytes / (d * static_cast<std::int64_t>(sizeof(float))));
#pragma omp parallel for schedule(static) num_threads(compute_threads())
  for (std::int64_t i = 0; i < rows; ++i) {
    const float* xr = xp + i * d;
    float* yr = yp + i * d;
    if (i + ahead < rows) {
      for (std::int64_t j = 0; j < d; j += kLineFloats) __builtin_prefetch(xr + ahead * d + j);
    }
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (std::int64_t j = 0; j < d; ++j) sum += xr[j];
    const float rough = sum * inv_d;
    // Corrected two-pass (Chan, Golub & LeVeque): the deviations from the first-pass mean
    // sum to zero in exact arithmetic, so their computed sum is that mean's rounding error
    // and corrects both the mean and the variance. The row is still in L1 for this pass.
    float dev = 0.0f;
    float sq = 0.0f;
#pragma omp simd reduction(+ : dev, sq)
    for (std::int64_t j = 0; j < d; ++j) {
      const float c = xr[j] - rough;
      dev += c;
      sq += c * c;
    }
    const float var = std::max((sq - dev * dev * inv_d) * inv_d, 0.0f);
    const float m = rough + dev * inv_d;
    const float rs = 1.0f / std::sqrt(var + eps);
#pragma omp simd
    for (std::int64_t j = 0; j < d; ++j) yr[j] = (xr[j] - m) * rs * g[j] + b[j];
    mp[i] = m;
    rp[i] = rs;
  }
  return Status::success();
}

Status layernorm_backward_input(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                const Tensor& mean, const Tensor& rstd, Tensor& dx) {
  const OpTimer timer(KernelOp::layernorm_backward_input);
  constexpr const char* kOp = "layernorm_backward_input";
  SPW_TRY(check_x(kOp, "x", x));
  SPW_TRY(check_like_x(kOp, "dy", dy, x));
  SPW_TRY(check_weight(kOp, "gamma", gamma, x));
  SPW_TRY(check_stat(kOp, "mean", mean, x));
  SPW_TRY(check_stat(kOp, "rstd", rstd, x));
  SPW_TRY(check_like_x(kOp, "dx", dx, x));

  const std::int64_t rows = x.shape().rows();
  const std::int64_t d = x.shape().cols();
  const float inv_d = 1.0f / static_cast<float>(d);
  const float* dyp = dy.data();
  const float* xp = x.data();
  const float* g = gamma.data();
  const float* mp = mean.data();
  const float* rp = rstd.data();
  float* dxp = dx.data();

  // With g = dy ⊙ gamma and xhat = (x - mean) rstd:
  //   dx = rstd (g - mean(g) - xhat mean(g ⊙ xhat)).
#if defined(__AVX512F__)
  if (layernorm_detail::fits_registers(d)) {
    const layernorm_detail::BackwardInputRow row = layernorm_detail::backward_input_row_for(d);
#pragma omp parallel for schedule(static) num_threads(compute_threads())
    for (std::int64_t i = 0; i < rows; ++i) {
      row(dyp + i * d, xp + i * d, g, mp[i], rp[i], inv_d, dxp + i * d);
    }
    return Status::success();
  }
#elif defined(__AVX2__) && defined(__FMA__)
  // Each thread a contiguous range of rows, as schedule(static) would give it.
#pragma omp parallel num_threads(compute_threads())
  {
    const std::int64_t team = omp_get_num_threads();
    const std::int64_t thread = omp_get_thread_num();
    const std::int64_t begin = rows * thread / team;
    const std::int64_t end = rows * (thread + 1) / team;
    if (end > begin) {
      layernorm_avx2::backward_input_rows(dyp, xp, g, mp, rp, d, begin, end, inv_d, dxp);
    }
  }
  return Status::success();
#endif
#pragma omp parallel for schedule(static) num_threads(compute_threads())
  for (std::int64_t i = 0; i < rows; ++i) {
    const float* dyr = dyp + i * d;
    const float* xr = xp + i * d;
    float* dxr = dxp + i * d;
    const float m = mp[i];
    const float rs = rp[i];
    float sum_g = 0.0f;
    float sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_g, sum_gx)
    for (std::int64_t j = 0; j < d; ++j) {
      const float gj = dyr[j] * g[j];
      sum_g += gj;
      sum_gx += gj * ((xr[j] - m) * rs);
    }
    const float mean_g = sum_g * inv_d;
    const float mean_gx = sum_gx * inv_d;
#pragma omp simd
    for (std::int64_t j = 0; j < d; ++j) {
      const float xhat = (xr[j] - m) * rs;
      dxr[j] = rs * (dyr[j] * g[j] - mean_g - xhat * mean_gx);
    }
  }
  return Status::success();
}

Status layernorm_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                 const Tensor& rstd, Tensor& dgamma, Tensor& dbeta) {
  const OpTimer timer(KernelOp::layernorm_backward_weight);
  constexpr const char* kOp = "layernorm_backward_weight";
  SPW_TRY(check_x(kOp, "x", x));
  SPW_TRY(check_like_x(kOp, "dy", dy, x));
  SPW_TRY(check_stat(kOp, "mean", mean, x));
  SPW_TRY(check_stat(kOp, "rstd", rstd, x));
  SPW_TRY(check_weight(kOp, "dgamma", dgamma, x));
  SPW_TRY(check_weight(kOp, "dbeta", dbeta, x));

  const std::int64_t rows = x.shape().rows();
  const std::int64_t d = x.shape().cols();
  const std::int64_t groups = std::clamp<std::int64_t>((rows + kGroupRows - 1) / kGroupRows, 1,
                                                       kMaxGroups);
  // Each group's row holds its dgamma partial, then its dbeta partial, each padded to whole
  // cache lines so that groups summed by different threads never share a line.
  const std::int64_t padded = (d + kLineFloats - 1) / kLineFloats * kLineFloats;
  const std::int64_t stride = 2 * padded;
  // The partials are reused from call to call: at d = 256 the whole pass takes tens of
  // microseconds, about what mapping and unmapping fresh scratch costs.
  thread_local ScratchBuffer scratch;
  SPW_ASSIGN_OR_RETURN(void* memory,
                       scratch.reserve(static_cast<std::size_t>(groups * stride) * sizeof(float)));
  float* partial = static_cast<float*>(memory);
  const float* dyp = dy.data();
  const float* xp = x.data();
  const float* mp = mean.data();
  const float* rp = rstd.data();
  float* dg = dgamma.data();
  float* db = dbeta.data();

  // Rows of 4 KiB or more go four at a time over all columns (weight_rows_streamed in
  // layernorm_rows.hpp), narrower ones a column block at a time over all rows (weight_rows).
  // A column block's sweep reads 512 bytes of every row, a page apart at d 1024, which the
  // prefetchers do not follow; four rows from start to end they do. On the Zen 5 at [2048,
  // 1024] (bench_kernels, medians of 3 runs alternated, 2026-11-27, /tmp/s16/ln-*) that was
  // 1.24x as fast on one thread and 1.31x on two (the Zen 4's tiles of 8 rows, which it
  // replaces, ran on one thread only), and 1.12x in L2; at d 512 it was 0.87x on one thread,
  // at d 256 within the noise. Same bits either way. Without AVX-512 the rows go four at a
  // time at every width (layernorm_rows_avx2.hpp: the column blocks were slower on the Zen 3).
  [[maybe_unused]] constexpr std::int64_t kStreamedWidth = 1024;

  // A reduction over rows. Threads split the rows (as every other pass over dy and x does,
  // streaming whole rows) into a fixed number of groups that depends only on the row count;
  // the group partials are then added in group order. So the result does not depend on the
  // thread count or the schedule, and the rounding error grows with rows / groups + groups.
#pragma omp parallel num_threads(compute_threads())
  {
#pragma omp for schedule(static)
    for (std::int64_t group = 0; group < groups; ++group) {
      float* pg = partial + group * stride;
      float* pb = pg + padded;
      const std::int64_t begin = group * rows / groups;
      const std::int64_t end = (group + 1) * rows / groups;
#if defined(__AVX512F__)
      if (d % 16 == 0) {
        if (d >= kStreamedWidth) {
          layernorm_detail::weight_rows_streamed(dyp, xp, mp, rp, d, begin, end, pg, pb);
        } else {
          layernorm_detail::weight_rows(dyp, xp, mp, rp, d, begin, end, pg, pb);
        }
        continue;
      }
#elif defined(__AVX2__) && defined(__FMA__)
      layernorm_avx2::weight_rows(dyp, xp, mp, rp, d, begin, end, pg, pb);
      continue;
#endif
      std::fill_n(pg, stride, 0.0f);
      for (std::int64_t i = begin; i < end; ++i) {
        const float* dyr = dyp + i * d;
        const float* xr = xp + i * d;
        const float m = mp[i];
        const float rs = rp[i];
#pragma omp simd
        for (std::int64_t j = 0; j < d; ++j) {
          pg[j] += dyr[j] * ((xr[j] - m) * rs);
          pb[j] += dyr[j];
        }
      }
    }
    // The implicit barrier above makes every partial visible. Each thread now owns whole
    // cache lines of the outputs.
#pragma omp for schedule(static)
    for (std::int64_t c0 = 0; c0 < stride; c0 += kLineFloats) {
      alignas(64) float sum[kLineFloats] = {};
      for (std::int64_t group = 0; group < groups; ++group) {
        const float* p = partial + group * stride + c0;
#pragma omp simd
        for (std::int64_t k = 0; k < kLineFloats; ++k) sum[k] += p[k];
      }
      const bool is_beta = c0 >= padded;
      const std::int64_t col = is_beta ? c0 - padded : c0;
      float* out = (is_beta ? db : dg) + col;
      const std::int64_t n = std::min(kLineFloats, d - col);
      for (std::int64_t k = 0; k < n; ++k) out[k] += sum[k];
    }
  }
  return Status::success();
}

}  // namespace spw::ops
