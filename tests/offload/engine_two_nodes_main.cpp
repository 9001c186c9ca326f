// The engine in a process whose hwloc sees a faked machine of 8 PUs (HWLOC_SYNTHETIC with
// HWLOC_THISSYSTEM=1, set by ctest) on a real one with fewer: a PU hwloc knows but the OS
// does not have cannot be bound to, and the engine must still run, unbound, and say why.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "offload/engine.hpp"
#include "offload/file_tier.hpp"

namespace spw::offload {
namespace {

TEST(EngineOnAFakedNode, RunsUnboundWhenTheOsRefusesItsPu) {
  ASSERT_NE(std::getenv("HWLOC_SYNTHETIC"), nullptr) << "run through ctest";
  auto tier = make_file_tier("");
  ASSERT_TRUE(tier.ok()) << tier.status().message();
  auto engine = OffloadEngine::create(std::move(tier).value(), {false, 7});
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  EXPECT_EQ((*engine)->bound_pu(), -1);
  EXPECT_EQ((*engine)->binding_note(),
            "cannot bind the offload engine to PU 7 (Invalid argument): it runs unbound");
  EXPECT_FALSE((*engine)->cpus().empty());

  std::vector<unsigned char> buffer(4096, 0x5a);
  ASSERT_TRUE((*engine)->evict(1, {{buffer.data(), buffer.size()}}).ok());
  ASSERT_TRUE((*engine)->wait(1).ok());
  buffer.assign(buffer.size(), 0);
  ASSERT_TRUE((*engine)->prefetch(1, {{buffer.data(), buffer.size()}}).ok());
  ASSERT_TRUE((*engine)->wait(1).ok());
  EXPECT_EQ(buffer, std::vector<unsigned char>(4096, 0x5a));
}

}  // namespace
}  // namespace spw::offload
