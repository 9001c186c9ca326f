// The tier's rate over copies that overlap: bytes over the union of their intervals.
#include <gtest/gtest.h>

#include "offload/transfer_rate.hpp"

namespace spw::offload {
namespace {

TEST(CombinedRate, OverlappingCopiesCountTheirTimeOnce) {
  // Two engines copying 1 GB each over the same second, then one alone for another second.
  const CombinedRate rate = combined_rate({{10.0, 11.0, 1'000'000'000},
                                           {11.0, 12.0, 1'000'000'000},
                                           {10.5, 11.0, 1'000'000'000}});
  EXPECT_EQ(rate.bytes, 3'000'000'000u);
  EXPECT_DOUBLE_EQ(rate.busy_s, 2.0);
  EXPECT_DOUBLE_EQ(rate.gb_per_s(), 1.5);
}

TEST(CombinedRate, GapsAreNotCountedAndOrderDoesNotMatter) {
  const CombinedRate rate =
      combined_rate({{5.0, 5.5, 500}, {1.0, 2.0, 1000}, {1.5, 1.75, 250}, {7.0, 6.0, 8}});
  EXPECT_EQ(rate.bytes, 1758u);  // an interval ending before it starts moves bytes in no time
  EXPECT_DOUBLE_EQ(rate.busy_s, 1.5);
}

TEST(CombinedRate, NothingCopiedIsZero) {
  const CombinedRate rate = combined_rate({});
  EXPECT_EQ(rate.bytes, 0u);
  EXPECT_EQ(rate.busy_s, 0.0);
  EXPECT_EQ(rate.gb_per_s(), 0.0);
}

}  // namespace
}  // namespace spw::offload
