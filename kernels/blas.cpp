#include "blas.hpp"

#include <blis.h>

#include "blas_kernels.hpp"
#include "threading.hpp"

namespace spw::blas {

void sgemm(Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
           const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
           float* c, std::int64_t ldc, int threads) {
  if (m <= 0 || n <= 0) return;
  // Callers that never ran setup_threads (tests, benchmarks) get the same kernels.
  (void)choose_kernels();
  // op(A) is m x k. Row-major A stored [m, k]: row stride lda, column stride 1. A stored
  // [k, m] and transposed: element (i, p) lives at p * lda + i.
  const inc_t rs_a = op_a == Op::none ? lda : 1;
  const inc_t cs_a = op_a == Op::none ? 1 : lda;
  const inc_t rs_b = op_b == Op::none ? ldb : 1;
  const inc_t cs_b = op_b == Op::none ? 1 : ldb;

  rntm_t rntm = BLIS_RNTM_INITIALIZER;
  bli_rntm_set_num_threads(threads > 0 ? threads : compute_threads(), &rntm);
  float alpha_value = alpha;
  float beta_value = beta;
  bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &alpha_value,
               const_cast<float*>(a), rs_a, cs_a, const_cast<float*>(b), rs_b, cs_b,
               &beta_value, c, ldc, 1, nullptr, &rntm);
}

}  // namespace spw::blas
