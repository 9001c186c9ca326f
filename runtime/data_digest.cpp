#include "runtime/data_digest.hpp"

#include <cstring>

namespace spw {

namespace {

constexpr std::uint64_t kOdd = 0x9e3779b97f4a7c15ULL;  // the golden ratio's, odd

// splitmix64's output function: folds each lane's state so that every input bit reaches
// every output bit.
std::uint64_t finish(std::uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

std::uint64_t data_digest(const void* data, std::size_t bytes) {
  constexpr std::size_t kLanes = 8;
  const auto* in = static_cast<const unsigned char*>(data);
  std::uint64_t lane[kLanes];
  for (std::size_t l = 0; l < kLanes; ++l) lane[l] = kOdd * (l + 1);
  const std::size_t words = bytes / 8;
  const std::size_t whole = words / kLanes * kLanes;
  for (std::size_t w = 0; w < whole; w += kLanes) {
    std::uint64_t block[kLanes];
    std::memcpy(block, in + w * 8, sizeof block);
#pragma omp simd
    for (std::size_t l = 0; l < kLanes; ++l) {
      // Adding the word before the multiply keeps a zero word from leaving a lane alone;
      // the rotation moves high bits, which the multiply left unmixed, down.
      const std::uint64_t x = (lane[l] + block[l]) * kOdd;
      lane[l] = (x << 23) | (x >> 41);
    }
  }
  std::uint64_t h = static_cast<std::uint64_t>(bytes) * kOdd;
  for (std::size_t l = 0; l < kLanes; ++l) h = finish(h ^ lane[l]);
  for (std::size_t i = whole * 8; i < bytes; ++i) h = finish(h ^ (in[i] + 0x100ULL * i));
  return h;
}

}  // namespace spw
