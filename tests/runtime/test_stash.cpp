// A Stash linked to a spare (the executor's recycling of microbatch memory under offload):
// memory given back waits in the spare's same place, at most one tensor per place, and the
// next get() of that place and shape takes it without allocating; a get() the spare cannot
// serve calls the owner's on_miss before it allocates.
#include <gtest/gtest.h>

#include <functional>

#include "kernels/memory_ledger.hpp"
#include "runtime/stash.hpp"

namespace spw {
namespace {

MemoryLedger& ledger() { return MemoryLedger::process(); }

TEST(Stash, AGetTakesTheSparesTensorOfThatPlaceAndShapeWithoutAllocating) {
  Stash spare;
  int misses = 0;
  const std::function<void()> on_miss = [&] { ++misses; };
  Stash first, second;
  first.recycle_from(&spare, &on_miss);
  second.recycle_from(&spare, &on_miss);
  auto made = first.get(2, {64, 32});
  ASSERT_TRUE(made.ok()) << made.status().message();
  EXPECT_EQ(misses, 1);
  (*made)->fill(3.0f);
  const float* memory = (*made)->data();
  const std::size_t held = ledger().current_total();

  first.give_back(2);
  EXPECT_EQ(first.at(2).allocation(), nullptr);
  EXPECT_EQ(spare.bytes(), 64u * 32 * sizeof(float));
  EXPECT_EQ(ledger().current_total(), held);  // parked memory stays in the ledger

  const std::size_t reserved = ledger().reserved_total();
  auto taken = second.get(2, {64, 32});
  ASSERT_TRUE(taken.ok());
  EXPECT_EQ((*taken)->data(), memory);
  EXPECT_EQ((*taken)->data()[0], 3.0f);  // what the last user left, as a pooled slot has
  EXPECT_EQ(ledger().reserved_total(), reserved);
  EXPECT_EQ(spare.bytes(), 0u);
  EXPECT_EQ(misses, 1);
}

TEST(Stash, AnotherPlaceOrShapeCallsOnMissThenAllocates) {
  Stash spare, stash;
  int misses = 0;
  const std::function<void()> on_miss = [&] {
    ++misses;
    spare.release();  // what the executor does with memory nothing will take next
  };
  stash.recycle_from(&spare, &on_miss);
  ASSERT_TRUE(stash.get(0, {16, 16}).ok());
  stash.give_back(0);
  const std::size_t held = ledger().current_total();
  const std::size_t reserved = ledger().reserved_total();
  ASSERT_TRUE(stash.get(1, {16, 16}).ok());  // another place: the spare's is freed first
  EXPECT_EQ(misses, 2);
  EXPECT_EQ(spare.bytes(), 0u);
  EXPECT_EQ(ledger().reserved_total(), reserved + 16 * 16 * sizeof(float));
  EXPECT_EQ(ledger().current_total(), held);
}

TEST(Stash, TheSpareHoldsOneTensorPerPlaceAndFreesTheRest) {
  Stash spare;
  const std::function<void()> on_miss = [] {};
  Stash a, b;
  a.recycle_from(&spare, &on_miss);
  b.recycle_from(&spare, &on_miss);
  ASSERT_TRUE(a.get(0, {32, 32}).ok());
  ASSERT_TRUE(b.get(0, {32, 32}).ok());
  ASSERT_TRUE(b.get(1, {4}).ok());
  const std::size_t held = ledger().current_total();
  a.give_back_all();
  b.give_back_all();  // place 0 is taken: b's tensor there is freed, place 1 parks
  EXPECT_EQ(spare.slot_count(), 2u);
  EXPECT_EQ(spare.bytes(), (32u * 32 + 4) * sizeof(float));
  EXPECT_EQ(ledger().current_total(), held - 32 * 32 * sizeof(float));
  EXPECT_EQ(a.bytes() + b.bytes(), 0u);
  spare.release();
  EXPECT_EQ(ledger().current_total(), held - (2 * 32 * 32 + 4) * sizeof(float));
}

// The executor's on_miss settles evictions that finished meanwhile, which parks their memory
// in the spare: the get() that called it takes that memory instead of allocating.
TEST(Stash, MemoryThatOnMissParksIsTakenWithoutAllocating) {
  Stash spare, evicted, next;
  const std::function<void()> nothing = [] {};
  evicted.recycle_from(&spare, &nothing);
  ASSERT_TRUE(evicted.get(3, {40, 8}).ok());
  const float* memory = evicted.at(3).data();
  int misses = 0;
  const std::function<void()> settle = [&] {
    ++misses;
    evicted.give_back(3);  // what settling a finished eviction does
  };
  next.recycle_from(&spare, &settle);
  const std::size_t reserved = ledger().reserved_total();
  auto taken = next.get(3, {40, 8});
  ASSERT_TRUE(taken.ok()) << taken.status().message();
  EXPECT_EQ(misses, 1);
  EXPECT_EQ((*taken)->data(), memory);
  EXPECT_EQ(ledger().reserved_total(), reserved);
  EXPECT_EQ(spare.bytes(), 0u);

  // A parked tensor of another shape is not taken: the get() allocates.
  ASSERT_TRUE(evicted.get(3, {40, 8}).ok());
  auto other = next.get(4, {8});
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(misses, 2);
  EXPECT_EQ(ledger().reserved_total(), reserved + (40 * 8 + 8) * sizeof(float));
}

TEST(Stash, WithoutASpareGivingBackFrees) {
  Stash stash;
  ASSERT_TRUE(stash.get(0, {128}).ok());
  const std::size_t held = ledger().current_total();
  stash.give_back(0);
  stash.give_back(5);  // a place never used
  EXPECT_EQ(ledger().current_total(), held - 128 * sizeof(float));
}

}  // namespace
}  // namespace spw
