#include "kernels/fma_units.hpp"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <limits>

namespace spw::blas {

namespace {

// Enough independent chains to cover the FMA latency (4 cycles) on two units, with room.
constexpr int kChains = 12;
constexpr int kRounds = 16384;  // kChains * kRounds FMAs a timing: 50-100 microseconds
constexpr int kTimings = 7;    // the fastest of each counts: the machine is shared

// Both loops run only where the CPU has AVX-512 F, so both are compiled for it, whatever the
// build's -march; the 256-bit one still issues 256-bit FMAs.
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")

struct Avx2 {
  using Vector = __m256;
  static Vector set(float v) { return _mm256_set1_ps(v); }
  static Vector fma(Vector a, Vector b, Vector c) { return _mm256_fmadd_ps(a, b, c); }
};

struct Avx512 {
  using Vector = __m512;
  static Vector set(float v) { return _mm512_set1_ps(v); }
  static Vector fma(Vector a, Vector b, Vector c) { return _mm512_fmadd_ps(a, b, c); }
};

template <typename Isa>
[[gnu::noinline]] double seconds_for_chains() {
  typename Isa::Vector acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = Isa::set(1.0f + static_cast<float>(c) * 1e-3f);
  const typename Isa::Vector scale = Isa::set(0.999999f);
  const typename Isa::Vector shift = Isa::set(1e-7f);
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < kRounds; ++r) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = Isa::fma(acc[c], scale, shift);
  }
  // The chains' results must be used, or the loop goes away.
  for (int c = 0; c < kChains; ++c) asm volatile("" : : "v"(acc[c]));
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

#pragma GCC pop_options

}  // namespace

int measure_fma512_units() {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("fma")) return 0;
  double best256 = std::numeric_limits<double>::infinity();
  double best512 = best256;
  // Intel cores power the upper half of the 512-bit units up on first use and run them slowly
  // for some microseconds: one untimed round first.
  seconds_for_chains<Avx512>();
  // Alternated, so that a clock change or a neighbour's burst falls on both.
  for (int t = 0; t < kTimings; ++t) {
    best256 = std::min(best256, seconds_for_chains<Avx2>());
    best512 = std::min(best512, seconds_for_chains<Avx512>());
  }
  // Same instruction count: two units run the 512-bit loop as fast as the 256-bit one (two
  // 256-bit FMA ports on every such core), one unit at half the rate. A lower AVX-512 clock
  // costs 10-25%, not half.
  return best512 <= best256 / 0.65 ? 2 : 1;
}

}  // namespace spw::blas
