// LayerNorm kernels against each other where layernorm.cpp picks one by width or by CPU: the
// AVX-512 weight-gradient kernels, and each forward kernel with and without asking for its
// output lines ahead (write_prefetch.hpp). Each pair must give the same bits, so that a result
// never depends on the kernel or the machine's vendor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <type_traits>
#include <vector>

#include "kernels/ops/layernorm_rows.hpp"
#include "kernels/ops/layernorm_rows_avx2.hpp"

namespace spw {
namespace {

#if defined(__AVX512F__)
TEST(LayerNormRows, WeightGradientKernelsGiveTheSameBits) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const std::int64_t d : {16, 128, 144, 1024, 1040}) {
    for (const std::int64_t rows : {1, 4, 7, 33}) {
      std::vector<float> dy(static_cast<std::size_t>(rows * d)), x(dy.size());
      std::vector<float> mean(static_cast<std::size_t>(rows)), rstd(mean.size());
      for (float& v : dy) v = normal(rng);
      for (float& v : x) v = normal(rng);
      for (float& v : mean) v = 0.1f * normal(rng);
      for (float& v : rstd) v = 1.0f + 0.1f * normal(rng);
      std::vector<float> pg_columns(static_cast<std::size_t>(d), -1.0f), pb_columns(pg_columns);
      std::vector<float> pg_rows(pg_columns), pb_rows(pg_columns);
      ops::layernorm_detail::weight_rows(dy.data(), x.data(), mean.data(), rstd.data(), d, 0,
                                         rows, pg_columns.data(), pb_columns.data());
      ops::layernorm_detail::weight_rows_streamed(dy.data(), x.data(), mean.data(), rstd.data(),
                                                  d, 0, rows, pg_rows.data(), pb_rows.data());
      EXPECT_EQ(pg_rows, pg_columns) << "d " << d << ", rows " << rows;
      EXPECT_EQ(pb_rows, pb_columns) << "d " << d << ", rows " << rows;
      // Both start the partials afresh: the -1 they were filled with is gone.
      double sum_b = 0;
      for (std::int64_t i = 0; i < rows; ++i) sum_b += dy[static_cast<std::size_t>(i * d)];
      EXPECT_NEAR(pb_rows[0], sum_b, 1e-4);
    }
  }
}
#else
TEST(LayerNormRows, WeightGradientKernelsGiveTheSameBits) {
  GTEST_SKIP() << "the AVX-512 kernels are not in this build";
}
#endif

// A forward kernel's outputs and statistics with write prefetches (way 1) and without (way
// 0), on rows of mean about 3. `kernel(std::bool_constant<prefetch>, x, gamma, beta, d, rows,
// y, mean, rstd)` runs rows [0, rows) of width d.
template <class Kernel>
void expect_prefetch_changes_no_bits(std::initializer_list<std::int64_t> widths,
                                     std::initializer_list<std::int64_t> row_counts,
                                     Kernel kernel) {
  for (const std::int64_t d : widths) {
    for (const std::int64_t rows : row_counts) {
      std::mt19937 rng(static_cast<unsigned>(rows * 1000 + d));
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::vector<float> x(static_cast<std::size_t>(rows * d));
      std::vector<float> gamma(static_cast<std::size_t>(d)), beta(gamma.size());
      for (float& v : x) v = 3.0f + normal(rng);
      for (float& v : gamma) v = 1.0f + 0.1f * normal(rng);
      for (float& v : beta) v = 0.1f * normal(rng);
      std::vector<float> y[2], mean[2], rstd[2];
      for (int way = 0; way < 2; ++way) {
        y[way].assign(x.size(), -7.0f);
        mean[way].assign(static_cast<std::size_t>(rows), -7.0f);
        rstd[way].assign(static_cast<std::size_t>(rows), -7.0f);
      }
      kernel(std::false_type{}, x.data(), gamma.data(), beta.data(), d, rows, y[0].data(),
             mean[0].data(), rstd[0].data());
      kernel(std::true_type{}, x.data(), gamma.data(), beta.data(), d, rows, y[1].data(),
             mean[1].data(), rstd[1].data());
      EXPECT_EQ(y[0], y[1]) << "d " << d << ", rows " << rows;
      EXPECT_EQ(mean[0], mean[1]) << "d " << d << ", rows " << rows;
      EXPECT_EQ(rstd[0], rstd[1]) << "d " << d << ", rows " << rows;
      // The last row (a block's filler where rows is no multiple of the block) was computed,
      // not left as the -7 the buffers held: its statistics against double precision.
      const float* last = x.data() + (rows - 1) * d;
      double sum = 0, sq = 0;
      for (std::int64_t j = 0; j < d; ++j) sum += last[j];
      const double m = sum / static_cast<double>(d);
      for (std::int64_t j = 0; j < d; ++j) sq += (last[j] - m) * (last[j] - m);
      const double rs = 1.0 / std::sqrt(sq / static_cast<double>(d) + 1e-5);
      EXPECT_NEAR(mean[0].back(), m, 1e-5 * std::abs(m)) << "d " << d << ", rows " << rows;
      EXPECT_NEAR(rstd[0].back(), rs, 1e-4 * rs) << "d " << d << ", rows " << rows;
    }
  }
}

#if defined(__AVX512F__)
TEST(LayerNormRows, ForwardWithWritePrefetchGivesTheSameBits) {
  expect_prefetch_changes_no_bits(
      {16, 256, 272, 496}, {1, 4, 7, 33},
      [](auto prefetch, const float* x, const float* g, const float* b, std::int64_t d,
         std::int64_t rows, float* y, float* m, float* r) {
        ops::layernorm_detail::forward_rows<decltype(prefetch)::value>(
            x, g, b, d, 0, rows, rows - 1, 1.0f / static_cast<float>(d), 1e-5f, y, m, r);
      });
}
#endif

#if defined(__AVX2__) && defined(__FMA__)
TEST(LayerNormRows, Avx2ForwardWithWritePrefetchGivesTheSameBits) {
  expect_prefetch_changes_no_bits(
      {8, 100, 512, 1000, 1024}, {1, 2, 7, 33},
      [](auto prefetch, const float* x, const float* g, const float* b, std::int64_t d,
         std::int64_t rows, float* y, float* m, float* r) {
        ops::layernorm_avx2::forward_rows<decltype(prefetch)::value>(
            x, g, b, d, 0, rows, rows - 1, 1.0f / static_cast<float>(d), 1e-5f, y, m, r);
      });
}
#endif

}  // namespace
}  // namespace spw
