// The peer tier: stashes in another rank's memory, through an MPI RMA window. Every rank
// exposes, in one window, the space its clients (the ranks naming it as their peer) asked
// for; each client owns a fixed range of its peer's window and allocates stashes in it.
// Stores are MPI_Put and loads MPI_Get under a shared passive-target lock, issued from the
// engine thread, so the peer does nothing to serve them and MPI must be initialised with
// MPI_THREAD_MULTIPLE.
//
// On one node Open MPI's default osc component gets at 2 GB/s where osc sm gets 9 GB/s:
// job scripts and tests pass `--mca osc sm` (or OMPI_MCA_osc=sm); the library never sets it.
//
// At creation each client writes zeros over its range, so the window's pages are mapped in
// every process that touches them before the first stash (first-touch faults made the first
// evictions several times slower than later ones).
//
// Lifetime: creating and destroying the tier are collective over the communicator
// (MPI_Win_allocate / MPI_Win_free), so every rank destroys its tier (its engine) at the
// same point, before MPI_Finalize.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "kernels/status.hpp"
#include "offload/range_allocator.hpp"
#include "offload/tier.hpp"

namespace spw::offload {

class PeerTier final : public Tier {
 public:
  // Collective over `comm`: every rank calls it naming its own peer (-1 for none) and the
  // capacity it needs there. Every rank returns the same error when any rank's arguments
  // are wrong (a peer outside the communicator or itself), MPI lacks MPI_THREAD_MULTIPLE,
  // or a rank cannot lend the space under its memory cap. The space a rank lends is
  // accounted as offload_staging in its process ledger.
  static Result<std::unique_ptr<PeerTier>> create(MPI_Comm comm, int peer,
                                                  std::size_t capacity_bytes);
  ~PeerTier() override;  // collective: MPI_Win_free

  const char* name() const override { return "peer"; }
  // memory_cap with the numbers when the stash does not fit in the free capacity;
  // communication when MPI fails.
  Status store(std::uint64_t id, const std::vector<Region>& regions) override;
  Status load(std::uint64_t id, const std::vector<Region>& regions) override;
  void drop(std::uint64_t id) override;

  int peer() const { return peer_; }
  std::size_t capacity() const { return space_.capacity(); }
  std::size_t free_bytes() const { return space_.free_bytes(); }
  std::size_t lent_bytes() const { return lent_; }  // this rank's window, for its clients
  // Where this rank's range starts in its peer's window (for tests reading a peer's window).
  std::size_t range_offset() const { return static_cast<std::size_t>(range_offset_); }
  MPI_Win window() const { return window_; }

 private:
  struct Placed {
    std::size_t offset = 0;
    std::size_t bytes = 0;
  };
  PeerTier(int peer, std::size_t capacity) : peer_(peer), space_(capacity) {}
  std::string describe(bool put, std::uint64_t id) const;
  Status transfer(bool put, const std::string& what, std::size_t offset,
                  const std::vector<Region>& regions);
  Status touch_range();  // zeros over this rank's range of its peer's window

  int peer_;
  MPI_Aint range_offset_ = 0;
  RangeAllocator space_;
  std::size_t lent_ = 0;
  MPI_Win window_ = MPI_WIN_NULL;
  std::unordered_map<std::uint64_t, Placed> placed_;
};

// PeerTier::create as a Tier.
Result<std::unique_ptr<Tier>> make_peer_tier(MPI_Comm comm, int peer, std::size_t capacity_bytes);

}  // namespace spw::offload
