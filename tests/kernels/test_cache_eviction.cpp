#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cache_eviction.hpp"
#include "kernels/tensor.hpp"

namespace spw {
namespace {

std::uint8_t pattern(std::size_t i, int round) {
  return static_cast<std::uint8_t>((i * 131 + static_cast<std::size_t>(round) * 7) & 0xFF);
}

// Eviction writes dirty lines back before dropping them: what was just stored, at any
// alignment and length, partial first and last lines included, reads back unchanged, and the
// bytes around the range too.
TEST(CacheEviction, DirtyDataSurvivesAtAnyAlignmentAndLength) {
  std::vector<std::uint8_t> buffer(8192);
  int round = 0;
  for (std::size_t offset : {0, 1, 63, 64, 100}) {
    for (std::size_t length : {0, 1, 63, 64, 65, 4000}) {
      ++round;
      for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = pattern(i, round);
      evict_from_caches(buffer.data() + offset, length);
      for (std::size_t i = 0; i < buffer.size(); ++i) {
        ASSERT_EQ(buffer[i], pattern(i, round))
            << "byte " << i << " after evicting " << length << " bytes at offset " << offset;
      }
    }
  }
}

TEST(CacheEviction, TensorsKeepTheirValuesAndEmptyOnesAreNoWork) {
  auto t = Tensor::zeros(Shape{37, 19}, MemoryCategory::workspace);
  ASSERT_TRUE(t.ok()) << t.status().message();
  for (std::int64_t i = 0; i < t->numel(); ++i) t->data()[i] = static_cast<float>(i) * 0.5f;
  evict_from_caches(*t);
  for (std::int64_t i = 0; i < t->numel(); ++i) {
    ASSERT_EQ(t->data()[i], static_cast<float>(i) * 0.5f) << "element " << i;
  }
  evict_from_caches(Tensor());
  evict_from_caches(nullptr, 4096);
}

}  // namespace
}  // namespace spw
