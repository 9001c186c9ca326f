// The host tier in a process whose hwloc sees a faked two-node machine (HWLOC_SYNTHETIC with
// HWLOC_THISSYSTEM=1, set by ctest). The real machine has one node, so stashes for node 1
// end up unbound, which the tier says; the data must still round-trip.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/memory_ledger.hpp"
#include "offload/engine.hpp"
#include "offload/host_tier.hpp"

namespace spw::offload {
namespace {

TEST(HostTierOnTwoNodes, RoundTripsThroughTheOtherNode) {
  ASSERT_NE(std::getenv("HWLOC_SYNTHETIC"), nullptr) << "run through ctest";
  auto created = HostTier::create(0);
  ASSERT_TRUE(created.ok()) << created.status().message();
  HostTier* tier = created->get();
  EXPECT_EQ(tier->node(), 1);
  auto engine = OffloadEngine::create(std::move(created).value(), {true, 0});
  ASSERT_TRUE(engine.ok()) << engine.status().message();

  std::mt19937 random(11);
  std::vector<std::vector<unsigned char>> buffers = {std::vector<unsigned char>(12345),
                                                     std::vector<unsigned char>(777777)};
  for (auto& buffer : buffers)
    for (auto& b : buffer) b = static_cast<unsigned char>(random());
  const auto original = buffers;
  std::vector<Region> regions;
  for (auto& buffer : buffers) regions.push_back({buffer.data(), buffer.size()});

  const std::size_t rank_bytes = MemoryLedger::process().current_total();
  ASSERT_TRUE((*engine)->evict(5, regions).ok());
  ASSERT_TRUE((*engine)->wait(5).ok());
  EXPECT_EQ(tier->ledger().current_total(), 12345u + 777777u);
  EXPECT_EQ(MemoryLedger::process().current_total(), rank_bytes);  // not the rank's memory
  EXPECT_NE(tier->binding_note().find("NUMA node 1"), std::string::npos) << tier->binding_note();

  for (auto& buffer : buffers) std::fill(buffer.begin(), buffer.end(), 0);
  ASSERT_TRUE((*engine)->prefetch(5, regions).ok());
  Status status = (*engine)->wait(5);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(buffers, original);
  EXPECT_EQ(tier->ledger().current_total(), 0u);
  EXPECT_EQ(tier->ledger().peak_total(), 12345u + 777777u);
}

}  // namespace
}  // namespace spw::offload
