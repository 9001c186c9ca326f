#include "kernels/cache_eviction.hpp"

#include <cstdint>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace spw {

namespace {

constexpr std::uintptr_t kLineBytes = 64;

#if defined(__x86_64__)
bool has_clflushopt() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (ebx & (1u << 23)) != 0;  // CPUID.(EAX=7,ECX=0):EBX[23]
}

// CLFLUSHOPT lets the flushes of many lines overlap; CLFLUSH completes them one at a time.
[[gnu::target("clflushopt")]] void flush_lines_unordered(std::uintptr_t first,
                                                         std::uintptr_t end) {
  for (std::uintptr_t line = first; line < end; line += kLineBytes) {
    _mm_clflushopt(reinterpret_cast<void*>(line));
  }
}

void flush_lines_in_order(std::uintptr_t first, std::uintptr_t end) {
  for (std::uintptr_t line = first; line < end; line += kLineBytes) {
    _mm_clflush(reinterpret_cast<const void*>(line));
  }
}
#endif

}  // namespace

void evict_from_caches(const void* data, std::size_t bytes) {
  if (data == nullptr || bytes == 0) return;
  const auto begin = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t first = begin & ~(kLineBytes - 1);
  const std::uintptr_t end = begin + bytes;
#if defined(__x86_64__)
  static const bool unordered = has_clflushopt();
  if (unordered) {
    flush_lines_unordered(first, end);
  } else {
    flush_lines_in_order(first, end);
  }
  _mm_mfence();  // CLFLUSHOPT is ordered only by fences
#elif defined(__aarch64__)
  for (std::uintptr_t line = first; line < end; line += kLineBytes) {
    asm volatile("dc civac, %0" : : "r"(line) : "memory");
  }
  asm volatile("dsb ish" : : : "memory");
#else
  (void)first;
  (void)end;
#endif
}

}  // namespace spw
