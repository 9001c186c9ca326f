// The engine's contract: data comes back equal, requests for an id run in order, failures
// reach wait() naming the id and leave the caller's memory alone, misuse is refused at once,
// and nothing stays stored after the engine is gone.
#include <gtest/gtest.h>
#include <hwloc.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "offload/engine.hpp"
#include "offload/file_tier.hpp"

namespace spw::offload {
namespace {

// An in-memory tier whose failures the test switches on; `live` outlives it.
class MemoryTier final : public Tier {
 public:
  explicit MemoryTier(std::shared_ptr<int> live) : live_(std::move(live)) {}
  const char* name() const override { return "memory"; }
  Status store(std::uint64_t id, const std::vector<Region>& regions) override {
    if (fail_store) return error(StatusCode::io_error, "injected store failure");
    auto& bytes = stored_[id];
    bytes.clear();
    for (const Region& r : regions)
      bytes.insert(bytes.end(), static_cast<char*>(r.data), static_cast<char*>(r.data) + r.bytes);
    *live_ = static_cast<int>(stored_.size());
    return Status::success();
  }
  Status load(std::uint64_t id, const std::vector<Region>& regions) override {
    if (fail_load) return error(StatusCode::io_error, "injected load failure");
    const auto& bytes = stored_.at(id);
    std::size_t at = 0;
    for (const Region& r : regions) {
      std::memcpy(r.data, bytes.data() + at, r.bytes);
      at += r.bytes;
    }
    return Status::success();
  }
  void drop(std::uint64_t id) override {
    stored_.erase(id);
    *live_ = static_cast<int>(stored_.size());
  }
  bool fail_store = false, fail_load = false;

 private:
  std::shared_ptr<int> live_;
  std::map<std::uint64_t, std::vector<char>> stored_;
};

// Regions of odd sizes over random bytes, and a copy to compare against.
struct Stash {
  std::vector<std::vector<unsigned char>> buffers;
  std::vector<std::vector<unsigned char>> original;
  Stash(std::uint32_t seed, const std::vector<std::size_t>& sizes) {
    std::mt19937 random(seed);
    for (std::size_t size : sizes) {
      buffers.emplace_back(size);
      for (auto& b : buffers.back()) b = static_cast<unsigned char>(random());
    }
    original = buffers;
  }
  std::vector<Region> regions() {
    std::vector<Region> out;
    for (auto& b : buffers) out.push_back({b.data(), b.size()});
    return out;
  }
  void scribble() {
    for (auto& b : buffers) std::fill(b.begin(), b.end(), 0xEE);
  }
  bool intact() const { return buffers == original; }
};

std::unique_ptr<OffloadEngine> engine_on(std::unique_ptr<Tier> tier, bool verify = true) {
  auto engine = OffloadEngine::create(std::move(tier), {verify, -1});
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  return engine.ok() ? std::move(engine).value() : nullptr;
}

TEST(OffloadEngine, FileTierRoundTripOfOddSizes) {
  auto tier = FileTier::create("", 64 << 10);  // a small staging buffer: many blocks per stash
  ASSERT_TRUE(tier.ok()) << tier.status().message();
  auto engine = engine_on(std::move(tier).value());
  ASSERT_TRUE(engine);
  const std::vector<std::size_t> sizes = {1, 4095, 0, 4097, (3 << 20) + 7, 65536};
  Stash stash(1, sizes);
  ASSERT_TRUE(engine->evict(42, stash.regions()).ok());
  ASSERT_TRUE(engine->wait(42).ok());
  stash.scribble();  // the caller may reuse its memory once the evict finished
  ASSERT_TRUE(engine->prefetch(42, stash.regions()).ok());
  double waited = -1;
  Status status = engine->wait(42, &waited);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_GE(waited, 0.0);
  EXPECT_TRUE(stash.intact());
  const EngineStats stats = engine->stats();
  std::size_t total = 0;
  for (std::size_t s : sizes) total += s;
  EXPECT_EQ(stats.bytes_evicted, total);
  EXPECT_EQ(stats.bytes_prefetched, total);
  EXPECT_EQ(stats.evictions, 1u);
  EXPECT_EQ(stats.prefetches, 1u);
  // Moving 3 MiB takes the thread some CPU (system calls, and copies of the unaligned ends),
  // never more than the time the request took.
  EXPECT_GT(stats.evict_cpu_seconds, 0.0);
  EXPECT_GT(stats.prefetch_cpu_seconds, 0.0);
  EXPECT_LE(stats.evict_cpu_seconds, stats.evict_seconds + 1e-3);
  EXPECT_LE(stats.prefetch_cpu_seconds, stats.prefetch_seconds + 1e-3);
  // Mapping the targets' pages is part of the prefetch, counted apart.
  EXPECT_GE(stats.map_seconds, 0.0);
  EXPECT_LE(stats.map_seconds, stats.prefetch_seconds);
  EXPECT_LE(stats.map_cpu_seconds, stats.prefetch_cpu_seconds);
  EXPECT_STREQ(engine->tier().name(), "file");
}

TEST(OffloadEngine, ManyIdsInFlightComeBackInOrderWithoutWaitsBetween) {
  auto tier = FileTier::create("", 16 << 10);
  ASSERT_TRUE(tier.ok()) << tier.status().message();
  auto engine = engine_on(std::move(tier).value());
  ASSERT_TRUE(engine);
  std::vector<Stash> stashes;
  for (std::uint32_t id = 0; id < 48; ++id)
    stashes.emplace_back(id, std::vector<std::size_t>{id * 977 + 3, 5000 - id * 13});
  // Evict and prefetch each id back to back: per-id order makes the prefetch see the copy.
  for (std::uint32_t id = 0; id < 48; ++id) {
    ASSERT_TRUE(engine->evict(id, stashes[id].regions()).ok());
    if (id % 2 == 0) {
      ASSERT_TRUE(engine->prefetch(id, stashes[id].regions()).ok());
    }
  }
  for (std::uint32_t id = 1; id < 48; id += 2) {
    ASSERT_TRUE(engine->wait(id).ok());
    stashes[id].scribble();
    ASSERT_TRUE(engine->prefetch(id, stashes[id].regions()).ok());
  }
  for (std::uint32_t id = 0; id < 48; ++id) {
    Status status = engine->wait(id);
    ASSERT_TRUE(status.ok()) << status.message();
    EXPECT_TRUE(engine->done(id));
    EXPECT_TRUE(stashes[id].intact()) << "id " << id;
  }
  EXPECT_EQ(engine->stats().evictions, 48u);
  EXPECT_EQ(engine->stats().prefetches, 48u);
}

TEST(OffloadEngine, VerifyCatchesAStashCorruptedOnDisk) {
  for (const bool verify : {true, false}) {
    auto tier = FileTier::create("");
    ASSERT_TRUE(tier.ok()) << tier.status().message();
    FileTier* file_tier = tier->get();
    auto engine = engine_on(std::move(tier).value(), verify);
    ASSERT_TRUE(engine);
    Stash stash(3, {1000, 20000});
    ASSERT_TRUE(engine->evict(7, stash.regions()).ok());
    ASSERT_TRUE(engine->wait(7).ok());
    // Flip one byte of the second region in the stored file (the engine is idle).
    FILE* file = std::fopen(file_tier->file_of(7).c_str(), "r+b");
    ASSERT_NE(file, nullptr);
    const long at = static_cast<long>(file_tier->file_offset_of(7, 1, 123));
    ASSERT_GE(at, 0);
    ASSERT_EQ(std::fseek(file, at, SEEK_SET), 0);
    const int byte = std::fgetc(file);
    ASSERT_EQ(std::fseek(file, at, SEEK_SET), 0);
    std::fputc(byte ^ 0x01, file);
    std::fclose(file);
    ASSERT_TRUE(engine->prefetch(7, stash.regions()).ok());
    Status status = engine->wait(7);
    if (verify) {
      ASSERT_FALSE(status.ok());
      EXPECT_EQ(status.code(), StatusCode::io_error);
      const std::string& m = status.message();
      EXPECT_EQ(m.rfind("prefetching stash 7 from the file tier: CRC32C of region 1 is 0x", 0), 0u)
          << m;
      EXPECT_NE(m.find(": the stored copy was corrupted"), std::string::npos) << m;
    } else {
      EXPECT_TRUE(status.ok()) << status.message();  // without verify it goes unnoticed
      EXPECT_EQ(stash.buffers[1][123], stash.original[1][123] ^ 0x01);
    }
  }
}

TEST(OffloadEngine, AFailedEvictReachesWaitAndLeavesTheStashWithTheCaller) {
  auto live = std::make_shared<int>(0);
  auto owned = std::make_unique<MemoryTier>(live);
  MemoryTier* tier = owned.get();
  tier->fail_store = true;
  auto engine = engine_on(std::move(owned));
  ASSERT_TRUE(engine);
  Stash stash(5, {300});
  ASSERT_TRUE(engine->evict(9, stash.regions()).ok());
  Status status = engine->wait(9);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message(), "evicting stash 9 to the memory tier: injected store failure");
  EXPECT_TRUE(engine->wait(9).ok());  // reported once
  EXPECT_TRUE(stash.intact());
  EXPECT_EQ(*live, 0);
  // Nothing is stored, so there is nothing to prefetch; evicting again is allowed.
  Status prefetch = engine->prefetch(9, stash.regions());
  EXPECT_EQ(prefetch.message(),
            "prefetch of stash 9: it is not evicted (no evict since its last prefetch)");
  tier->fail_store = false;  // the engine is idle: no request is running
  ASSERT_TRUE(engine->evict(9, stash.regions()).ok());
  EXPECT_TRUE(engine->wait(9).ok());
  EXPECT_EQ(*live, 1);
}

TEST(OffloadEngine, APrefetchQueuedBehindAFailedEvictFailsToo) {
  auto live = std::make_shared<int>(0);
  auto owned = std::make_unique<MemoryTier>(live);
  owned->fail_store = true;
  auto engine = engine_on(std::move(owned));
  ASSERT_TRUE(engine);
  Stash stash(6, {64});
  ASSERT_TRUE(engine->evict(1, stash.regions()).ok());
  // The engine thread may finish the failed evict before the prefetch is queued; then the
  // prefetch is refused at once instead. Either way nothing is fetched and the evict's
  // failure is what wait reports.
  const Status queued = engine->prefetch(1, stash.regions());
  if (!queued.ok()) {
    EXPECT_NE(queued.message().find("it is not evicted"), std::string::npos) << queued.message();
  }
  Status status = engine->wait(1);
  EXPECT_EQ(status.message(), "evicting stash 1 to the memory tier: injected store failure");
  EXPECT_TRUE(stash.intact());
  EXPECT_EQ(engine->stats().prefetches, 0u);
}

// transfers(): each successful store and load, in order, on the steady clock; failed ones
// are not copies the device made.
TEST(OffloadEngine, TransfersListTheSuccessfulCopiesInOrder) {
  auto live = std::make_shared<int>(0);
  auto owned = std::make_unique<MemoryTier>(live);
  MemoryTier* tier = owned.get();
  auto engine = engine_on(std::move(owned));
  ASSERT_TRUE(engine);
  Stash stash(8, {128, 64});
  const double before = std::chrono::duration<double>(
                            std::chrono::steady_clock::now().time_since_epoch()).count();
  ASSERT_TRUE(engine->evict(4, stash.regions()).ok());
  ASSERT_TRUE(engine->prefetch(4, stash.regions()).ok());
  ASSERT_TRUE(engine->wait(4).ok());
  tier->fail_store = true;
  ASSERT_TRUE(engine->evict(5, stash.regions()).ok());
  EXPECT_FALSE(engine->wait(5).ok());
  const auto copies = engine->transfers();
  ASSERT_EQ(copies.size(), 2u);
  for (const EngineTransfer& t : copies) {
    EXPECT_EQ(t.bytes, 128u + 64u);
    EXPECT_GE(t.start_s, before);
    EXPECT_GE(t.end_s, t.start_s);
  }
  EXPECT_LE(copies[0].end_s, copies[1].start_s);  // one copy at a time, in queue order
}

TEST(OffloadEngine, AFailedLoadNamesTheIdAndDropsTheCopy) {
  auto live = std::make_shared<int>(0);
  auto owned = std::make_unique<MemoryTier>(live);
  MemoryTier* tier = owned.get();
  auto engine = engine_on(std::move(owned));
  ASSERT_TRUE(engine);
  Stash stash(8, {128});
  ASSERT_TRUE(engine->evict(2, stash.regions()).ok());
  ASSERT_TRUE(engine->wait(2).ok());
  tier->fail_load = true;
  ASSERT_TRUE(engine->prefetch(2, stash.regions()).ok());
  EXPECT_EQ(engine->wait(2).message(),
            "prefetching stash 2 from the memory tier: injected load failure");
  EXPECT_EQ(*live, 0);
}

TEST(OffloadEngine, MisuseIsRefusedAtOnce) {
  auto engine = engine_on(std::make_unique<MemoryTier>(std::make_shared<int>(0)));
  ASSERT_TRUE(engine);
  Stash stash(9, {16, 32});
  EXPECT_EQ(engine->prefetch(3, stash.regions()).message(),
            "prefetch of stash 3: it is not evicted (no evict since its last prefetch)");
  ASSERT_TRUE(engine->evict(3, stash.regions()).ok());
  EXPECT_EQ(engine->evict(3, stash.regions()).message(),
            "evict of stash 3: it is already evicted; prefetch it before evicting it again");
  EXPECT_EQ(engine->prefetch(3, {{stash.buffers[0].data(), 16}}).message(),
            "prefetch of stash 3: 1 regions, but it was evicted as 2");
  EXPECT_EQ(engine->prefetch(3, {{stash.buffers[0].data(), 16}, {stash.buffers[1].data(), 31}})
                .message(),
            "prefetch of stash 3: region 1 has 31 bytes, but it was evicted with 32");
  EXPECT_EQ(engine->evict(4, {{nullptr, 8}}).message(),
            "evict of stash 4: region 0 has 8 bytes but no data");
  ASSERT_TRUE(engine->prefetch(3, stash.regions()).ok());
  EXPECT_TRUE(engine->wait(3).ok());
  EXPECT_TRUE(stash.intact());
}

TEST(OffloadEngine, WaitAndDoneOnAnUnknownIdReturnAtOnce) {
  auto engine = engine_on(std::make_unique<MemoryTier>(std::make_shared<int>(0)));
  ASSERT_TRUE(engine);
  double waited = -1;
  EXPECT_TRUE(engine->wait(12345, &waited).ok());
  EXPECT_GE(waited, 0.0);
  EXPECT_TRUE(engine->done(12345));
}

TEST(OffloadEngine, DestroyingItDropsEveryStoredStash) {
  auto live = std::make_shared<int>(0);
  Stash stash(10, {256});
  {
    auto engine = engine_on(std::make_unique<MemoryTier>(live));
    ASSERT_TRUE(engine);
    for (std::uint64_t id = 0; id < 5; ++id) ASSERT_TRUE(engine->evict(id, stash.regions()).ok());
    for (std::uint64_t id = 0; id < 5; ++id) ASSERT_TRUE(engine->wait(id).ok());
    EXPECT_EQ(*live, 5);
  }
  EXPECT_EQ(*live, 0);
}

TEST(OffloadEngine, BindsItsThreadToTheGivenPu) {
  auto engine = OffloadEngine::create(std::make_unique<MemoryTier>(std::make_shared<int>(0)),
                                      {false, 0});
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  EXPECT_EQ((*engine)->bound_pu(), 0);
  EXPECT_EQ((*engine)->cpus(), std::vector<int>{0});
  EXPECT_EQ((*engine)->binding_note(), "");
  auto unbound = engine_on(std::make_unique<MemoryTier>(std::make_shared<int>(0)));
  ASSERT_TRUE(unbound);
  EXPECT_EQ(unbound->bound_pu(), -1);
  // Unbound, it may run where the thread that made it may.
  hwloc_topology_t topology;
  hwloc_topology_init(&topology);
  hwloc_topology_load(topology);
  hwloc_bitmap_t mine = hwloc_bitmap_alloc();
  ASSERT_EQ(hwloc_get_cpubind(topology, mine, HWLOC_CPUBIND_THREAD), 0);
  std::vector<int> expected;
  for (int pu = hwloc_bitmap_first(mine); pu >= 0; pu = hwloc_bitmap_next(mine, pu))
    expected.push_back(pu);
  hwloc_bitmap_free(mine);
  hwloc_topology_destroy(topology);
  EXPECT_EQ(unbound->cpus(), expected);
}

TEST(OffloadEngine, RefusesAPuThisNodeDoesNotHave) {
  auto engine = OffloadEngine::create(std::make_unique<MemoryTier>(std::make_shared<int>(0)),
                                      {false, 4096});
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(engine.status().message().rfind(
                "offload engine: PU 4096 does not exist on this node (PUs ", 0),
            0u)
      << engine.status().message();
  auto none = OffloadEngine::create(nullptr, {});
  EXPECT_EQ(none.status().message(), "offload engine: no tier given");
}

}  // namespace
}  // namespace spw::offload
