// blas::sgemm, the one door to BLIS, against plain loops: every transpose, through strides.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/blas.hpp"
#include "op_test_support.hpp"

namespace spw {
namespace {

std::vector<float> random_floats(std::int64_t count, std::uint64_t seed) {
  return testing::cast_vector<float>(testing::random_vector(static_cast<std::size_t>(count), seed));
}

struct GemmCase {
  blas::Op op_a, op_b;
  std::int64_t m, n, k;
  float alpha, beta;
};

// Sizes off every blocking of the haswell/zen kernels (MR 6, NR 16, KC 256, MC 144).
TEST(Sgemm, MatchesPlainLoopsForEveryTransposeAndOddSizes) {
  using blas::Op;
  const std::vector<GemmCase> cases = {
      {Op::none, Op::transpose, 256, 192, 256, 1.0f, 0.0f},
      {Op::none, Op::none, 37, 53, 301, 1.0f, 1.0f},
      {Op::transpose, Op::none, 145, 17, 517, 0.5f, 0.0f},
      {Op::transpose, Op::transpose, 13, 29, 7, -1.0f, 0.25f},
      {Op::none, Op::transpose, 1, 1, 1, 1.0f, 0.0f},
      {Op::none, Op::none, 150, 40, 259, 1.0f, 0.0f}};
  for (const GemmCase& c : cases) {
    // Stored shapes: A is [m, k] or, transposed, [k, m]; B is [k, n] or [n, k].
    const std::int64_t lda = c.op_a == Op::none ? c.k : c.m;
    const std::int64_t ldb = c.op_b == Op::none ? c.n : c.k;
    const std::vector<float> a = random_floats(c.m * c.k, 1);
    const std::vector<float> b = random_floats(c.k * c.n, 2);
    std::vector<float> out = random_floats(c.m * c.n, 3);
    const std::vector<float> before = out;
    blas::sgemm(c.op_a, c.op_b, c.m, c.n, c.k, c.alpha, a.data(), lda, b.data(), ldb, c.beta,
                out.data(), c.n, 1);
    for (std::int64_t i = 0; i < c.m; ++i) {
      for (std::int64_t j = 0; j < c.n; ++j) {
        double sum = 0.0, magnitude = 0.0;
        for (std::int64_t p = 0; p < c.k; ++p) {
          const double x = a[static_cast<std::size_t>(c.op_a == Op::none ? i * lda + p
                                                                          : p * lda + i)];
          const double y = b[static_cast<std::size_t>(c.op_b == Op::none ? p * ldb + j
                                                                          : j * ldb + p)];
          sum += x * y;
          magnitude += std::fabs(x * y);
        }
        const std::size_t at = static_cast<std::size_t>(i * c.n + j);
        const double expected = c.alpha * sum + c.beta * before[at];
        ASSERT_NEAR(out[at], expected, 1e-5 * (std::fabs(c.alpha) * magnitude + 1.0))
            << "m " << c.m << " n " << c.n << " k " << c.k << " at (" << i << ", " << j << ")";
      }
    }
  }
}

}  // namespace
}  // namespace spw
