// The allocator of the space a peer lends: first fit, aligned blocks, neighbours merging.
#include <gtest/gtest.h>

#include <optional>

#include "offload/range_allocator.hpp"

namespace spw::offload {
namespace {

TEST(RangeAllocator, HandsOutAlignedBlocksFirstFit) {
  RangeAllocator space(1024);
  EXPECT_EQ(space.allocate(10), 0u);
  EXPECT_EQ(space.allocate(64), 64u);
  EXPECT_EQ(space.allocate(65), 128u);  // two lines
  EXPECT_EQ(space.free_bytes(), 1024u - 256u);
  EXPECT_EQ(space.allocate(0), 0u);  // takes nothing
  EXPECT_EQ(space.free_bytes(), 1024u - 256u);
}

TEST(RangeAllocator, RefusesWhatDoesNotFitAndReusesFreedSpace) {
  RangeAllocator space(256);
  ASSERT_EQ(space.allocate(128), 0u);
  ASSERT_EQ(space.allocate(128), 128u);
  EXPECT_EQ(space.allocate(1), std::nullopt);
  space.release(0, 128);
  EXPECT_EQ(space.allocate(64), 0u);
  EXPECT_EQ(space.allocate(64), 64u);
  EXPECT_EQ(space.allocate(64), std::nullopt);
}

TEST(RangeAllocator, ReleasedNeighboursMergeIntoOneBlock) {
  RangeAllocator space(64 * 4);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(space.allocate(64), static_cast<std::size_t>(64 * i));
  space.release(64, 64);
  space.release(192, 64);
  EXPECT_EQ(space.largest_free(), 64u);
  EXPECT_EQ(space.allocate(128), std::nullopt);  // free, but in two pieces
  space.release(128, 64);                         // joins both
  EXPECT_EQ(space.largest_free(), 192u);
  EXPECT_EQ(space.allocate(192), 64u);
}

TEST(RangeAllocator, CapacityBelowAlignmentIsUnusable) {
  RangeAllocator space(100);
  EXPECT_EQ(space.capacity(), 64u);
  EXPECT_EQ(space.allocate(65), std::nullopt);
}

}  // namespace
}  // namespace spw::offload
