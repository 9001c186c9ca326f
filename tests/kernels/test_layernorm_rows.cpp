// The AVX-512 LayerNorm weight-gradient kernels against each other: layernorm.cpp picks one by
// width, and both must give the same bits, so that a result never depends on the kernel.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/ops/layernorm_rows.hpp"

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

}  // namespace
}  // namespace spw
