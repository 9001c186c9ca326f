// Exponentials on a whole AVX2 register (8 floats), for kernels written with intrinsics on
// CPUs without AVX-512 (Zen 2/3, Haswell to Ice Lake clients). The same polynomial as
// vecmath_avx512.hpp's exp2_16, so both paths round alike; AVX2 has no vscalefps, so 2^n is
// built in the exponent bits and the lanes it cannot represent are handled by clamps and a
// mask.
#pragma once

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

namespace spw::vecmath {

// 2^x: x = n + r with n = round(x), |r| <= 1/2, 2^r from its Taylor polynomial of degree 7
// (truncation below 6e-9). Lanes below -126 (where 2^x stops being a normal float), -inf and
// NaN give 0; from 127.5 on the result is +inf (n = 128 puts 255 in the exponent field), half
// a unit earlier than exp2_16, which is no loss for the softmaxes' arguments (all <= 0).
inline __m256 exp2_8(__m256 x) {
  const __m256 normal = _mm256_cmp_ps(x, _mm256_set1_ps(-126.0f), _CMP_GE_OQ);
  // Clamped so that n + 127 stays within the exponent field's 0..255.
  const __m256 xc = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(128.0f)),
                                  _mm256_set1_ps(-127.0f));
  const __m256 n = _mm256_round_ps(xc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 r = _mm256_sub_ps(xc, n);
  __m256 p = _mm256_set1_ps(1.5252733804059840e-5f);  // ln(2)^k / k!
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.5403530393381608e-4f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3333558146428443e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(9.6181291076284772e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.5504108664821580e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(2.4022650695910071e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(6.9314718055994531e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(normal, _mm256_mul_ps(p, _mm256_castsi256_ps(bits)));
}

}  // namespace spw::vecmath

#endif
