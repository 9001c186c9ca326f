// How many 512-bit instructions of the kinds GELU's kernels use one core retires a cycle,
// alone and in pairs: what bounds an op whose arithmetic, not memory, sets its rate
// (bench/kernels/README.md, "GELU forward on Zen 4"). Each row runs 12 independent chains of
// its sequence, so latency hides and only the execution pipes count; times are in units of
// one 512-bit FMA's (its reciprocal throughput), so a row of 2.0 takes two FMAs' worth.
//
//   bench_vector_pipes [ITERATIONS]   (default 20,000,000 per row; ~0.1 s a row)
//
// Needs AVX-512 F and DQ in the build (-march=native on such a machine); prints why not
// otherwise and exits 0, so that the smoke test passes on any build machine.
#include <chrono>
#include <cstdio>
#include <cstdlib>

#if defined(__AVX512F__) && defined(__AVX512DQ__)
#include <immintrin.h>

namespace {

// The zero-masking forms with a full mask are the same instructions; GCC 12 reports the plain
// intrinsics' undefined pass-through operand as maybe-uninitialized (GCC bug 105593).
constexpr __mmask16 kAll = 0xFFFF;

// Seconds for `iterations` passes of f over 12 chains. The empty asm keeps every chain in a
// register and live, so the compiler neither spills nor drops them.
template <class F>
double time_chains(long iterations, F f) {
  __m512 c0 = _mm512_set1_ps(1.000f), c1 = _mm512_set1_ps(1.001f), c2 = _mm512_set1_ps(1.002f);
  __m512 c3 = _mm512_set1_ps(1.003f), c4 = _mm512_set1_ps(1.004f), c5 = _mm512_set1_ps(1.005f);
  __m512 c6 = _mm512_set1_ps(1.006f), c7 = _mm512_set1_ps(1.007f), c8 = _mm512_set1_ps(1.008f);
  __m512 c9 = _mm512_set1_ps(1.009f), c10 = _mm512_set1_ps(1.01f), c11 = _mm512_set1_ps(1.011f);
  const auto start = std::chrono::steady_clock::now();
  for (long k = 0; k < iterations; ++k) {
    c0 = f(c0), c1 = f(c1), c2 = f(c2), c3 = f(c3), c4 = f(c4), c5 = f(c5);
    c6 = f(c6), c7 = f(c7), c8 = f(c8), c9 = f(c9), c10 = f(c10), c11 = f(c11);
    asm volatile(""
                 : "+v"(c0), "+v"(c1), "+v"(c2), "+v"(c3), "+v"(c4), "+v"(c5), "+v"(c6), "+v"(c7),
                   "+v"(c8), "+v"(c9), "+v"(c10), "+v"(c11));
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  const long iterations = argc > 1 ? std::atol(argv[1]) : 20'000'000;
  if (iterations < 1) {
    std::fprintf(stderr, "bench_vector_pipes: ITERATIONS must be a positive count, got %s\n",
                 argv[1]);
    return 2;
  }
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-4f), t = _mm512_set1_ps(3.0f);
  const __m512i index = _mm512_set_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const auto fma = [&](__m512 x) { return _mm512_fmadd_ps(x, a, b); };
  const auto add = [&](__m512 x) { return _mm512_add_ps(x, b); };
  const auto max = [&](__m512 x) { return _mm512_maskz_max_ps(kAll, x, b); };
  const auto permute2 = [&](__m512 x) { return _mm512_permutex2var_ps(x, index, t); };
  const auto permute = [&](__m512 x) { return _mm512_maskz_permutexvar_ps(kAll, index, x); };
  const auto range = [&](__m512 x) { return _mm512_maskz_range_ps(kAll, x, t, 0b1010); };
  const auto reduce = [&](__m512 x) {
    return _mm512_maskz_reduce_ps(kAll, x, _MM_FROUND_TO_NEG_INF);
  };
  const auto convert = [&](__m512 x) {
    return _mm512_castsi512_ps(_mm512_maskz_cvttps_epi32(kAll, x));
  };
  // The first run warms the core up to its clock; the reference is the second.
  time_chains(iterations, fma);
  const double fma_s = time_chains(iterations, fma) / static_cast<double>(iterations * 12);
  std::printf("one 512-bit FMA every %.3f ns (%.2f GHz if one a cycle)\n\n", fma_s * 1e9,
              1e-9 / fma_s);
  std::printf("| sequence | FMAs' time |\n| --- | --- |\n");
  const auto row = [&](const char* name, auto f) {
    const double s = time_chains(iterations, f) / static_cast<double>(iterations * 12);
    std::printf("| %s | %.2f |\n", name, s / fma_s);
  };
  row("fma", fma);
  row("add", add);
  row("fma, add", [&](__m512 x) { return add(fma(x)); });
  row("fma, fma", [&](__m512 x) { return fma(fma(x)); });
  row("add, max", [&](__m512 x) { return max(add(x)); });
  row("vpermt2ps", permute2);
  row("fma, vpermt2ps", [&](__m512 x) { return permute2(fma(x)); });
  row("add, vpermt2ps", [&](__m512 x) { return permute2(add(x)); });
  row("fma, add, vpermt2ps", [&](__m512 x) { return permute2(add(fma(x))); });
  row("fma, fma, vpermt2ps", [&](__m512 x) { return permute2(fma(fma(x))); });
  row("vpermps", permute);
  row("fma, vpermps", [&](__m512 x) { return permute(fma(x)); });
  row("vrangeps", range);
  row("fma, vrangeps", [&](__m512 x) { return range(fma(x)); });
  row("vcvttps2dq", convert);
  row("fma, vcvttps2dq", [&](__m512 x) { return convert(fma(x)); });
  row("vreduceps", reduce);
  row("fma, vreduceps", [&](__m512 x) { return reduce(fma(x)); });
  row("add, vreduceps", [&](__m512 x) { return reduce(add(x)); });
  return 0;
}

#else

int main() {
  std::printf("bench_vector_pipes: this build has no AVX-512 F and DQ; nothing to measure\n");
  return 0;
}

#endif
