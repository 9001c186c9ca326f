// The one door to BLIS. Row-major matrices, as every spillway tensor is; transposes are
// expressed by strides, which BLIS takes natively, so no operand is ever copied.
#pragma once

#include <cstdint>

namespace spw::blas {

enum class Op { none, transpose };

// C[m, n] = alpha * op(A)[m, k] * op(B)[k, n] + beta * C, all row-major with leading
// dimensions lda, ldb, ldc (the stored row lengths). `threads` = 0 uses compute_threads();
// call with 1 from inside an OpenMP parallel region. The first call chooses BLIS's kernels
// (choose_kernels); a process that honours the user's BLIS_ARCH_TYPE runs setup_threads
// first, which reports an unusable value where BLIS would stop the process on it.
void sgemm(Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
           const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
           float* c, std::int64_t ldc, int threads = 0);

}  // namespace spw::blas
