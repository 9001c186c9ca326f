// data_digest tells the ranks' data apart: equal bytes digest alike wherever they lie, and a
// change of any one bit, or of the length, digests apart.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <vector>

#include "runtime/data_digest.hpp"

namespace spw {
namespace {

std::vector<unsigned char> sample_bytes(std::size_t n) {
  std::vector<unsigned char> bytes(n);
  for (std::size_t i = 0; i < n; ++i) bytes[i] = static_cast<unsigned char>(i * 131 + 7);
  return bytes;
}

TEST(DataDigest, EqualBytesDigestAlikeAtAnyAddress) {
  const std::vector<unsigned char> a = sample_bytes(1000);
  std::vector<unsigned char> shifted(1003);
  std::copy(a.begin(), a.end(), shifted.begin() + 3);  // not 8-byte aligned
  EXPECT_EQ(data_digest(a.data(), a.size()), data_digest(shifted.data() + 3, a.size()));
}

TEST(DataDigest, EveryBitAndTheLengthCount) {
  // 1000 bytes: 15 blocks of 8 lanes of 8 bytes, then a 40-byte tail.
  const std::vector<unsigned char> a = sample_bytes(1000);
  const std::uint64_t base = data_digest(a.data(), a.size());
  std::set<std::uint64_t> seen{base};
  for (std::size_t byte : {0u, 7u, 8u, 63u, 64u, 500u, 959u, 960u, 999u}) {
    for (int bit : {0, 3, 7}) {
      std::vector<unsigned char> b = a;
      b[byte] ^= static_cast<unsigned char>(1u << bit);
      EXPECT_TRUE(seen.insert(data_digest(b.data(), b.size())).second)
          << "byte " << byte << " bit " << bit;
    }
  }
  // Zeros of different lengths, the empty block among them, and words swapped between lanes.
  const std::vector<unsigned char> zeros(200, 0);
  for (std::size_t n : {0u, 1u, 8u, 64u, 65u, 128u, 200u}) {
    EXPECT_TRUE(seen.insert(data_digest(zeros.data(), n)).second) << n << " zeros";
  }
  std::vector<unsigned char> swapped = a;
  std::swap_ranges(swapped.begin(), swapped.begin() + 8, swapped.begin() + 8);
  EXPECT_NE(data_digest(swapped.data(), swapped.size()), base);
}

}  // namespace
}  // namespace spw
