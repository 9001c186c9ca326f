#include "kernels/ops/activation.hpp"

#include "kernels/ops/op_checks.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace spw::ops {

namespace {

// GELU is the one op here whose arithmetic, not memory traffic, sets its speed. Built on
// vecmath::erf and vecmath::exp it ran at 30-60% of memcpy bandwidth; with the two rational
// functions below, which need neither exp nor erf, at 75-95%. Both are weighted minimax fits
// made for spillway (Loeb's linearised least squares, then Lawson reweighting, in 40-digit
// arithmetic on 600 Chebyshev points of [0, 6]) of an odd function plus 1/2:
//   Φ(x)          = 1/2 + x P(x²) / Q(x²)   degrees 6 / 4, fitted for the error of x Φ(x)
//   Φ(x) + x φ(x) = 1/2 + x R(x²) / S(x²)   degrees 7 / 5, GELU's derivative
// Evaluated in float, the error against the exact functions is at most 1.5e-6 in
// gelu_forward's x Φ(x) (3 ulp at |x| = 6) and 3.2e-7 in the derivative
// (tests/kernels/test_elementwise.cpp checks both on a dense grid). The accuracy is absolute,
// as downstream sums see it: in the left tail, where 1/2 + x P/Q cancels towards 0, the
// relative error of the tiny x Φ(x) grows (1e-5 at x = -2.6). Past |x| = 6 both are clamped:
// the exact functions are 0 or 1 there to within 4e-8.

// Coefficients from the highest power down.
constexpr float kCdfP[] = {1.082357644887463e-10f,  -2.6263787617773424e-8f,
                           5.0199294016367982e-6f,  0.00030828540304803184f,
                           0.0053504682326688179f,  0.048617281399202586f,
                           0.39894014185305847f};
constexpr float kCdfQ[] = {0.00011094977599348542f, 0.0026035688636980767f,
                           0.036526494184206582f,   0.28851042131498683f, 1.0f};
constexpr float kDerivR[] = {-1.5357892529036288e-11f, 2.7850869161605343e-9f,
                             -1.0088057819097111e-7f,  3.3008145004444199e-5f,
                             -0.0001481614789551983f,  0.014529995573357698f,
                             -0.04151717555485093f,    0.79788478964520042f};
constexpr float kDerivS[] = {5.5565721831280078e-6f, 0.00015020791469065756f,
                             0.0029522799803274079f, 0.036971818570140044f,
                             0.28130172755707336f,   1.0f};
constexpr float kClamp = 6.0f;

template <std::size_t N>
inline float horner(const float (&c)[N], float s) {
  float p = c[0];
#pragma GCC unroll 8
  for (std::size_t i = 1; i < N; ++i) p = p * s + c[i];
  return p;
}

#pragma omp declare simd notinbranch
inline float normal_cdf(float x) {
  const float c = x > kClamp ? kClamp : (x < -kClamp ? -kClamp : x);
  const float s = c * c;
  const float cdf = 0.5f + c * horner(kCdfP, s) / horner(kCdfQ, s);
  // Exactly 0 in the left tail: x Φ(x) must stay 0 however negative x gets, where the fit's
  // residual of a few 1e-8 would grow with |x|.
  return x <= -kClamp ? 0.0f : cdf;
}

// d/dx [x Φ(x)] = Φ(x) + x φ(x), φ the standard normal density.
#pragma omp declare simd notinbranch
inline float gelu_derivative(float x) {
  const float c = x > kClamp ? kClamp : (x < -kClamp ? -kClamp : x);
  const float s = c * c;
  return 0.5f + c * horner(kDerivR, s) / horner(kDerivS, s);
}

#if defined(__AVX512F__)
// The same functions on 16 lanes with the division replaced by a reciprocal estimate and one
// Newton step (relative error ~2^-28 before rounding, below the fits' own). vdivps occupies
// the FMA ports for about as long as both polynomials together, and with it GELU forward
// ran at 44% of memcpy's bandwidth on 2 threads at 2048 x 256, where the tensors stay in L2.
template <std::size_t N>
inline __m512 horner16(const float (&c)[N], __m512 s) {
  __m512 p = _mm512_set1_ps(c[0]);
#pragma GCC unroll 8
  for (std::size_t i = 1; i < N; ++i) p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(c[i]));
  return p;
}

// The zero-masking forms with a full mask are the same instructions; the plain intrinsics
// start from _mm512_undefined_ps, which GCC 12 reports as maybe-uninitialized.
constexpr __mmask16 kAll = 0xFFFF;

inline __m512 reciprocal16(__m512 q) {
  const __m512 r = _mm512_maskz_rcp14_ps(kAll, q);
  return _mm512_fmadd_ps(r, _mm512_fnmadd_ps(q, r, _mm512_set1_ps(1.0f)), r);
}

// The argument clamped to ±6; max and min return their second operand for NaN, so NaN
// passes through as in the scalar version.
inline __m512 clamped16(__m512 x) {
  return _mm512_maskz_min_ps(kAll, _mm512_set1_ps(kClamp),
                             _mm512_maskz_max_ps(kAll, _mm512_set1_ps(-kClamp), x));
}

// 1/2 + c P(c²) / Q(c²)
template <std::size_t NP, std::size_t NQ>
inline __m512 half_plus_ratio16(const float (&p)[NP], const float (&q)[NQ], __m512 c) {
  const __m512 s = _mm512_mul_ps(c, c);
  return _mm512_fmadd_ps(_mm512_mul_ps(c, horner16(p, s)), reciprocal16(horner16(q, s)),
                         _mm512_set1_ps(0.5f));
}

inline __m512 gelu16(__m512 x) {
  const __m512 y = _mm512_mul_ps(x, half_plus_ratio16(kCdfP, kCdfQ, clamped16(x)));
  // Not (x <= -6), unordered included: 0 in the left tail, NaN kept.
  const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-kClamp), _CMP_NLE_UQ);
  return _mm512_maskz_mov_ps(keep, y);
}

inline __m512 gelu_derivative16(__m512 x) {
  return half_plus_ratio16(kDerivR, kDerivS, clamped16(x));
}

// out[begin, end) = f(in) (times g with a gradient), whole vectors and a masked tail.
template <class F>
inline void map16(const float* in, const float* g, float* out, std::int64_t begin,
                  std::int64_t end, F f) {
  std::int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    __m512 y = f(_mm512_loadu_ps(in + i));
    if (g != nullptr) y = _mm512_mul_ps(_mm512_loadu_ps(g + i), y);
    _mm512_storeu_ps(out + i, y);
  }
  if (i < end) {
    const auto mask = static_cast<__mmask16>((1u << (end - i)) - 1u);
    __m512 y = f(_mm512_maskz_loadu_ps(mask, in + i));
    if (g != nullptr) y = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, g + i), y);
    _mm512_mask_storeu_ps(out + i, mask, y);
  }
}
#endif

Status check_unary(const char* op, const Tensor& x, const Tensor& y) {
  SPW_TRY(check_data(op, "x", x));
  SPW_TRY(check_same(op, "y", y, "x", x));
  SPW_TRY(check_data(op, "y", y));
  return check_alias(op, "y", y, "x", x);
}

Status check_backward(const char* op, const Tensor& dy, const Tensor& x, const Tensor& dx) {
  SPW_TRY(check_data(op, "x", x));
  SPW_TRY(check_same(op, "dy", dy, "x", x));
  SPW_TRY(check_same(op, "dx", dx, "x", x));
  SPW_TRY(check_data(op, "dy", dy));
  SPW_TRY(check_data(op, "dx", dx));
  SPW_TRY(check_alias(op, "dx", dx, "dy", dy));
  return check_alias(op, "dx", dx, "x", x);
}

// GELU works through its tensors in blocks of one page, so the static split of blocks is the
// allocator's first-touch split. From 16 MiB per tensor up it fetches the next block of each
// input while it computes on this one: there the hardware prefetcher alone left the forward
// at ~75% of memcpy bandwidth, against ~90% with the prefetch. Below that the tensors stay in
// cache between calls and the prefetches only cost issue slots (10-15%), so they are left out.
constexpr std::int64_t kBlock = 4096 / sizeof(float);
constexpr std::int64_t kLineFloats = 64 / sizeof(float);
constexpr std::int64_t kPrefetchFloats = (std::int64_t{16} << 20) / sizeof(float);

void prefetch_next_block(const float* data, std::int64_t end, std::int64_t n) {
  const std::int64_t count = std::min(kBlock, n - end);
  for (std::int64_t k = 0; k < count; k += kLineFloats) __builtin_prefetch(data + end + k, 0, 3);
}

}  // namespace

// The loops below split the flat elements statically, as the allocator first-touches whole
// tensors: each thread streams the pages on its own NUMA node, whatever the row length.
// GCC stops at 256-bit vectors on AVX-512 machines unless asked for more; simdlen(16) asks,
// and makes GELU 1.3x faster there. Elsewhere it is only a preference.

Status gelu_forward(const Tensor& x, Tensor& y) {
  SPW_TRY(check_unary("gelu_forward", x, y));
  const std::int64_t n = x.numel();
  const float* in = x.data();
  float* out = y.data();
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
  const bool prefetch = n >= kPrefetchFloats;
#pragma omp parallel for schedule(static)
  for (std::int64_t block = 0; block < blocks; ++block) {
    const std::int64_t begin = block * kBlock;
    const std::int64_t end = std::min(n, begin + kBlock);
    if (prefetch) prefetch_next_block(in, end, n);
#if defined(__AVX512F__)
    map16(in, nullptr, out, begin, end, [](__m512 v) { return gelu16(v); });
#else
#pragma omp simd simdlen(16)
    for (std::int64_t i = begin; i < end; ++i) out[i] = in[i] * normal_cdf(in[i]);
#endif
  }
  return Status::success();
}

Status gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx) {
  SPW_TRY(check_backward("gelu_backward", dy, x, dx));
  const std::int64_t n = x.numel();
  const float* g = dy.data();
  const float* in = x.data();
  float* out = dx.data();
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
  const bool prefetch = n >= kPrefetchFloats;
#pragma omp parallel for schedule(static)
  for (std::int64_t block = 0; block < blocks; ++block) {
    const std::int64_t begin = block * kBlock;
    const std::int64_t end = std::min(n, begin + kBlock);
    if (prefetch) {
      prefetch_next_block(g, end, n);
      prefetch_next_block(in, end, n);
    }
#if defined(__AVX512F__)
    map16(in, g, out, begin, end, [](__m512 v) { return gelu_derivative16(v); });
#else
#pragma omp simd simdlen(16)
    for (std::int64_t i = begin; i < end; ++i) out[i] = g[i] * gelu_derivative(in[i]);
#endif
  }
  return Status::success();
}

Status relu_forward(const Tensor& x, Tensor& y) {
  SPW_TRY(check_unary("relu_forward", x, y));
  const std::int64_t n = x.numel();
  const float* in = x.data();
  float* out = y.data();
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < n; ++i) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
  return Status::success();
}

Status relu_backward(const Tensor& dy, const Tensor& x, Tensor& dx) {
  SPW_TRY(check_backward("relu_backward", dy, x, dx));
  const std::int64_t n = x.numel();
  const float* g = dy.data();
  const float* in = x.data();
  float* out = dx.data();
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < n; ++i) out[i] = in[i] > 0.0f ? g[i] : 0.0f;
  return Status::success();
}

}  // namespace spw::ops
