// Exponentials on a whole AVX-512 register, for kernels written with intrinsics (masked row
// tails without scalar epilogues); 2^n is applied with vscalefps instead of building
// exponent bits.
#pragma once

#if defined(__AVX512F__)
#include <immintrin.h>

namespace spw::vecmath {

// GCC 12 warns falsely that the intrinsics' undefined pass-through operands may be used
// uninitialized (GCC bug 105593, fixed in 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// 2^x on a whole register, for softmaxes whose scores come pre-multiplied by log2(e) (folded
// into the products' scale): x = n + r with n = round(x), |r| <= 1/2, and 2^r from its Taylor
// polynomial of degree 7 (truncation below 6e-9). 10 instructions against 16 for e^x: no
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
