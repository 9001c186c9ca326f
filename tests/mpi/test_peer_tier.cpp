// The peer tier under mpiexec (2 and 4 ranks): stashes really land in the peer's window at
// the client's range and come back equal; several clients share one peer without overlap;
// a wrong argument or a rank that cannot lend under its cap fails every rank alike; a stash
// beyond the capacity is refused with the numbers; the lent window is in memory from
// creation. Every test is collective.
#include <gtest/gtest.h>
#include <mpi.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/memory_ledger.hpp"
#include "offload/engine.hpp"
#include "offload/peer_tier.hpp"

namespace spw::offload {
namespace {

int rank_of(MPI_Comm comm = MPI_COMM_WORLD) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank;
}
int size_of(MPI_Comm comm = MPI_COMM_WORLD) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  return size;
}

// Bytes every rank can recompute for any (owner, id).
std::vector<unsigned char> pattern(int owner, std::uint64_t id, std::size_t bytes) {
  std::mt19937 random(static_cast<std::uint32_t>(owner * 1000 + static_cast<int>(id)));
  std::vector<unsigned char> data(bytes);
  for (auto& b : data) b = static_cast<unsigned char>(random());
  return data;
}

std::unique_ptr<OffloadEngine> engine_for(int peer, std::size_t capacity) {
  auto tier = make_peer_tier(MPI_COMM_WORLD, peer, capacity);
  EXPECT_TRUE(tier.ok()) << tier.status().message();
  if (!tier.ok()) return nullptr;
  auto engine = OffloadEngine::create(std::move(tier).value(), {true, -1});
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  return engine.ok() ? std::move(engine).value() : nullptr;
}

TEST(PeerTier, StashesLandInTheNextRanksWindowAndComeBack) {
  const int rank = rank_of(), size = size_of();
  auto engine = engine_for((rank + 1) % size, 1 << 20);
  ASSERT_TRUE(engine);
  const std::vector<std::size_t> sizes = {4099, 1, 100003};
  std::vector<std::vector<unsigned char>> stashes;
  for (std::uint64_t id = 0; id < sizes.size(); ++id)
    stashes.push_back(pattern(rank, id, sizes[id]));
  for (std::uint64_t id = 0; id < sizes.size(); ++id)
    ASSERT_TRUE(engine->evict(id, {{stashes[id].data(), sizes[id]}}).ok());
  for (std::uint64_t id = 0; id < sizes.size(); ++id) ASSERT_TRUE(engine->wait(id).ok());
  MPI_Barrier(MPI_COMM_WORLD);

  // This rank's window holds its one client's stash 0 at offset 0 of that client's range.
  const auto& peer_tier = static_cast<const PeerTier&>(engine->tier());
  EXPECT_EQ(peer_tier.lent_bytes(), std::size_t{1} << 20);
  EXPECT_EQ(peer_tier.range_offset(), 0u);
  void* base = nullptr;
  int found = 0;
  MPI_Win_get_attr(peer_tier.window(), MPI_WIN_BASE, &base, &found);
  ASSERT_TRUE(found);
  const int client = (rank + size - 1) % size;
  MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, peer_tier.window());
  const bool landed = std::memcmp(base, pattern(client, 0, sizes[0]).data(), sizes[0]) == 0;
  MPI_Win_unlock(rank, peer_tier.window());
  EXPECT_TRUE(landed);
  MPI_Barrier(MPI_COMM_WORLD);

  for (auto& stash : stashes) std::fill(stash.begin(), stash.end(), 0);
  for (std::uint64_t id = 0; id < sizes.size(); ++id)
    ASSERT_TRUE(engine->prefetch(id, {{stashes[id].data(), sizes[id]}}).ok());
  for (std::uint64_t id = 0; id < sizes.size(); ++id) {
    Status status = engine->wait(id);
    ASSERT_TRUE(status.ok()) << status.message();
    EXPECT_EQ(stashes[id], pattern(rank, id, sizes[id])) << "stash " << id;
  }
  EXPECT_EQ(engine->stats().prefetches, sizes.size());
}

// Pages are mapped at first touch: the clients write their ranges at creation, so no stash
// pays for it. Every page of the window a rank lends is in memory before any store.
TEST(PeerTier, TheLentWindowIsInMemoryFromCreation) {
  const int rank = rank_of(), size = size_of();
  const std::size_t capacity = std::size_t{8} << 20;
  auto tier = make_peer_tier(MPI_COMM_WORLD, (rank + 1) % size, capacity);
  ASSERT_TRUE(tier.ok()) << tier.status().message();
  MPI_Barrier(MPI_COMM_WORLD);  // every client has written its range
  const auto& peer_tier = static_cast<const PeerTier&>(**tier);
  void* base = nullptr;
  int found = 0;
  MPI_Win_get_attr(peer_tier.window(), MPI_WIN_BASE, &base, &found);
  ASSERT_TRUE(found);
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const auto start = reinterpret_cast<std::uintptr_t>(base) / page * page;
  const std::size_t length =
      reinterpret_cast<std::uintptr_t>(base) + peer_tier.lent_bytes() - start;
  std::vector<unsigned char> resident((length + page - 1) / page);
  ASSERT_EQ(::mincore(reinterpret_cast<void*>(start), length, resident.data()), 0);
  std::size_t missing = 0;
  for (unsigned char r : resident) missing += (r & 1) == 0 ? 1 : 0;
  EXPECT_EQ(missing, 0u) << "of " << resident.size() << " pages of rank " << rank << "'s window";
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(PeerTier, ClientsOfOnePeerGetDisjointRanges) {
  // Every rank but 0 lends nothing and keeps its stashes on rank 0.
  const int rank = rank_of(), size = size_of();
  const std::size_t capacity = 8192;
  const std::size_t staging_before =
      MemoryLedger::process().snapshot().current_of(MemoryCategory::offload_staging);
  auto engine = engine_for(rank == 0 ? -1 : 0, capacity);
  ASSERT_TRUE(engine);
  const auto& tier = static_cast<const PeerTier&>(engine->tier());
  const std::size_t lent = rank == 0 ? capacity * static_cast<std::size_t>(size - 1) : 0;
  EXPECT_EQ(tier.lent_bytes(), lent);
  EXPECT_EQ(MemoryLedger::process().snapshot().current_of(MemoryCategory::offload_staging),
            staging_before + lent);
  if (rank > 0) {
    EXPECT_EQ(tier.range_offset(), capacity * static_cast<std::size_t>(rank - 1));
    std::vector<unsigned char> full = pattern(rank, 1, capacity);  // fills the whole range
    ASSERT_TRUE(engine->evict(1, {{full.data(), full.size()}}).ok());
    ASSERT_TRUE(engine->wait(1).ok());
  }
  MPI_Barrier(MPI_COMM_WORLD);  // every client has written before any reads back
  if (rank > 0) {
    std::vector<unsigned char> back(capacity, 0);
    ASSERT_TRUE(engine->prefetch(1, {{back.data(), back.size()}}).ok());
    Status status = engine->wait(1);
    ASSERT_TRUE(status.ok()) << status.message();
    EXPECT_EQ(back, pattern(rank, 1, capacity));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(PeerTier, AStashBeyondTheCapacityIsRefusedWithTheNumbers) {
  const int rank = rank_of(), size = size_of();
  const int peer = (rank + 1) % size;
  auto engine = engine_for(peer, 4096);
  ASSERT_TRUE(engine);
  std::vector<unsigned char> first(3000, 1), second(2000, 2);
  ASSERT_TRUE(engine->evict(1, {{first.data(), first.size()}}).ok());
  ASSERT_TRUE(engine->evict(2, {{second.data(), second.size()}}).ok());
  EXPECT_TRUE(engine->wait(1).ok());
  Status status = engine->wait(2);
  EXPECT_EQ(status.code(), StatusCode::memory_cap);
  // Stash 1 takes whole 64-byte lines: 3008 bytes, leaving 1088 (1.06 KiB).
  EXPECT_EQ(status.message(), "evicting stash 2 to the peer tier: stash 2 needs 1.95 KiB, but only "
                              "1.06 KiB of the 4.00 KiB this rank has on rank " +
                                  std::to_string(peer) +
                                  " are free (largest piece 1.06 KiB): raise the peer capacity");
  EXPECT_EQ(second, std::vector<unsigned char>(2000, 2));
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(PeerTier, AWrongPeerOnOneRankFailsEveryRankAlike) {
  const int rank = rank_of(), size = size_of();
  auto outside = make_peer_tier(MPI_COMM_WORLD, rank == 0 ? size : -1, 1024);
  ASSERT_FALSE(outside.ok());
  EXPECT_EQ(outside.status().message(),
            "peer tier: rank 0 names peer " + std::to_string(size) + ", but the communicator has " +
                std::to_string(size) + " ranks: name one of them or -1 for none");
  auto itself = make_peer_tier(MPI_COMM_WORLD, rank == size - 1 ? rank : -1, 1024);
  ASSERT_FALSE(itself.ok());
  EXPECT_EQ(itself.status().message(),
            "peer tier: rank " + std::to_string(size - 1) +
                " names itself as its peer: name another rank or -1 for none");
}

TEST(PeerTier, ARankThatCannotLendUnderItsCapFailsEveryRank) {
  const int rank = rank_of();
  MemoryLedger& ledger = MemoryLedger::process();
  if (rank == 1) {
    ASSERT_TRUE(ledger.set_cap(ledger.current_total() + 1000).ok());
  }
  auto tier = make_peer_tier(MPI_COMM_WORLD, rank == 0 ? 1 : -1, 1 << 20);
  if (rank == 1) {
    ASSERT_TRUE(ledger.set_cap(std::nullopt).ok());
  }
  ASSERT_FALSE(tier.ok());
  EXPECT_EQ(tier.status().code(), StatusCode::memory_cap);
  EXPECT_EQ(tier.status().message(),
            "peer tier: rank 1 cannot lend 1.00 MiB to its clients within its memory cap: lower "
            "the peer capacity or raise that rank's memory cap");
}

}  // namespace
}  // namespace spw::offload
