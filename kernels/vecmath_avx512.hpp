// vecmath::exp on a whole AVX-512 register, for kernels written with intrinsics (masked row
// tails without scalar epilogues). Same reduction, polynomial and limits as vecmath::exp;
// 2^n is applied with vscalefps instead of building exponent bits.
#pragma once

#if defined(__AVX512F__)
#include <immintrin.h>

namespace spw::vecmath {

// GCC 12 warns falsely that the intrinsics' undefined pass-through operands may be used
// uninitialized (GCC bug 105593, fixed in 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

inline __m512 exp16(__m512 x) {
  const __m512 max = _mm512_set1_ps(88.3762626647949f);
  const __m512 min = _mm512_set1_ps(-87.3365447504019f);
  x = _mm512_min_ps(x, max);
  const __mmask16 underflow = _mm512_cmp_ps_mask(x, min, _CMP_LT_OQ);
  x = _mm512_max_ps(x, min);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 er =
      _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(static_cast<__mmask16>(~underflow), er, n);
}

// 2^x on a whole register, for softmaxes whose scores come pre-multiplied by log2(e) (folded
// into the products' scale): x = n + r with n = round(x), |r| <= 1/2, and 2^r from its Taylor
// polynomial of degree 7 (truncation below 6e-9). 10 instructions against exp16's 16: no
// ln 2 reduction and no clamps, since lanes below -126 (where 2^x stops being a normal float,
// -inf included) are zeroed by the same mask as scalef. Above 128 the result is +inf.
inline __m512 exp2_16(__m512 x) {
  const __mmask16 normal = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-126.0f), _CMP_GE_OQ);
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(1.5252733804059840e-5f);  // ln(2)^k / k!
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.5403530393381608e-4f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3333558146428443e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(9.6181291076284772e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.5504108664821580e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(2.4022650695910071e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(6.9314718055994531e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(normal, p, n);
}

#pragma GCC diagnostic pop

}  // namespace spw::vecmath

#endif
