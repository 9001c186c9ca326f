#include "offload/peer_tier.hpp"

#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include "kernels/memory_ledger.hpp"

namespace spw::offload {

namespace {

// MPI counts are ints: move big regions in pieces well below INT_MAX.
constexpr std::size_t kPiece = std::size_t{1} << 30;

Status mpi_check(int rc, const std::string& what) {
  if (rc == MPI_SUCCESS) return Status::success();
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(rc, text, &length);
  return error(StatusCode::communication, what + ": " + std::string(text, length));
}

std::size_t aligned(std::size_t bytes) {
  const std::size_t a = RangeAllocator::kAlignment;
  return (bytes + a - 1) / a * a;
}

// The first rank whose request is wrong, as the same message on every rank.
Status check_requests(const std::vector<std::int64_t>& all, int size) {
  for (int r = 0; r < size; ++r) {
    const std::int64_t peer = all[static_cast<std::size_t>(2 * r)];
    const std::string who = "peer tier: rank " + std::to_string(r);
    if (peer < -1 || peer >= size)
      return error(StatusCode::invalid_argument,
                   who + " names peer " + std::to_string(peer) + ", but the communicator has " +
                       std::to_string(size) + " ranks: name one of them or -1 for none");
    if (peer == r)
      return error(StatusCode::invalid_argument,
                   who + " names itself as its peer: name another rank or -1 for none");
  }
  return Status::success();
}

}  // namespace

Result<std::unique_ptr<PeerTier>> PeerTier::create(MPI_Comm comm, int peer,
                                                   std::size_t capacity_bytes) {
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE)
    return error(StatusCode::unsupported,
                 "peer tier: the offload thread calls MPI, which needs MPI_THREAD_MULTIPLE: "
                 "initialise MPI with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...)");
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const std::int64_t capacity = peer < 0 ? 0 : static_cast<std::int64_t>(aligned(capacity_bytes));
  const std::int64_t mine[2] = {peer, capacity};
  std::vector<std::int64_t> all(static_cast<std::size_t>(2 * size));
  SPW_TRY(mpi_check(MPI_Allgather(mine, 2, MPI_INT64_T, all.data(), 2, MPI_INT64_T, comm),
                    "peer tier: sharing each rank's peer and capacity"));
  SPW_TRY(check_requests(all, size));

  // This rank lends what its clients asked for; its own range in its peer's window follows
  // the ranges of the lower ranks naming the same peer.
  std::vector<std::int64_t> lent(static_cast<std::size_t>(size), 0);
  std::int64_t offset = 0;
  for (int r = 0; r < size; ++r) {
    const std::int64_t p = all[static_cast<std::size_t>(2 * r)];
    const std::int64_t bytes = all[static_cast<std::size_t>(2 * r + 1)];
    if (p < 0) continue;
    lent[static_cast<std::size_t>(p)] += bytes;
    if (r < rank && p == peer) offset += bytes;
  }
  const auto my_lent = static_cast<std::size_t>(lent[static_cast<std::size_t>(rank)]);

  // Agree before allocating: a rank that cannot lend under its cap fails everyone alike.
  MemoryLedger& ledger = MemoryLedger::process();
  const bool reserved = ledger.reserve(MemoryCategory::offload_staging, my_lent).ok();
  const int failed_here = reserved ? size : rank;
  int first_failed = size;
  SPW_TRY(mpi_check(MPI_Allreduce(&failed_here, &first_failed, 1, MPI_INT, MPI_MIN, comm),
                    "peer tier: agreeing on the space to lend"));
  if (first_failed < size) {
    if (reserved) ledger.release(MemoryCategory::offload_staging, my_lent);
    return error(
        StatusCode::memory_cap,
        "peer tier: rank " + std::to_string(first_failed) + " cannot lend " +
            format_bytes(static_cast<std::size_t>(lent[static_cast<std::size_t>(first_failed)])) +
            " to its clients within its memory cap: lower the peer capacity or raise "
            "that rank's memory cap");
  }

  std::unique_ptr<PeerTier> tier(new PeerTier(peer, static_cast<std::size_t>(capacity)));
  tier->range_offset_ = static_cast<MPI_Aint>(offset);
  void* base = nullptr;
  const int rc = MPI_Win_allocate(static_cast<MPI_Aint>(my_lent), 1, MPI_INFO_NULL, comm, &base,
                                  &tier->window_);
  if (rc != MPI_SUCCESS) {
    ledger.release(MemoryCategory::offload_staging, my_lent);
    return mpi_check(rc, "peer tier: MPI_Win_allocate of " + format_bytes(my_lent));
  }
  tier->lent_ = my_lent;
  MPI_Win_set_errhandler(tier->window_, MPI_ERRORS_RETURN);

  // A window's pages are mapped at first touch, by each process that touches them: a first
  // MPI_Put into a fresh range ran at an eighth of the rate of later ones (osc sm, 1.0 against
  // 8.4 GB/s per CPU second), which made the first steps' evictions slow. Zeros over this
  // rank's range, put once here, move that cost to setup. A rank that fails fails everyone,
  // as each must free the window with the others.
  const Status touched = tier->touch_range();
  const int touch_failed_here = touched.ok() ? size : rank;
  int first_touch_failed = size;
  SPW_TRY(mpi_check(MPI_Allreduce(&touch_failed_here, &first_touch_failed, 1, MPI_INT, MPI_MIN,
                                  comm),
                    "peer tier: agreeing that every range is ready"));
  if (!touched.ok()) return touched;
  if (first_touch_failed < size)
    return error(StatusCode::communication,
                 "peer tier: rank " + std::to_string(first_touch_failed) +
                     " could not write its range of its peer's window (its own error says why)");
  return tier;
}

Status PeerTier::touch_range() {
  if (peer_ < 0 || space_.capacity() == 0) return Status::success();
  constexpr std::size_t kZeros = std::size_t{1} << 20;
  std::vector<unsigned char> zeros(std::min(kZeros, space_.capacity()));
  std::vector<Region> regions;
  for (std::size_t done = 0; done < space_.capacity(); done += zeros.size())
    regions.push_back({zeros.data(), std::min(zeros.size(), space_.capacity() - done)});
  return transfer(true, "zeroing this rank's range of rank " + std::to_string(peer_) + "'s window",
                  0, regions);
}

PeerTier::~PeerTier() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (window_ != MPI_WIN_NULL && !finalized) MPI_Win_free(&window_);
  MemoryLedger::process().release(MemoryCategory::offload_staging, lent_);
}

std::string PeerTier::describe(bool put, std::uint64_t id) const {
  return std::string(put ? "MPI_Put of stash " : "MPI_Get of stash ") + std::to_string(id) +
         (put ? " to rank " : " from rank ") + std::to_string(peer_);
}

Status PeerTier::transfer(bool put, const std::string& what, std::size_t offset,
                          const std::vector<Region>& regions) {
  SPW_TRY(mpi_check(MPI_Win_lock(MPI_LOCK_SHARED, peer_, 0, window_), what + " (lock)"));
  Status status;
  auto displacement = static_cast<MPI_Aint>(range_offset_ + static_cast<MPI_Aint>(offset));
  for (const Region& region : regions) {
    auto* bytes = static_cast<unsigned char*>(region.data);
    for (std::size_t done = 0; done < region.bytes && status.ok();) {
      const int n = static_cast<int>(std::min(kPiece, region.bytes - done));
      const int rc = put ? MPI_Put(bytes + done, n, MPI_BYTE, peer_, displacement, n, MPI_BYTE,
                                   window_)
                         : MPI_Get(bytes + done, n, MPI_BYTE, peer_, displacement, n, MPI_BYTE,
                                   window_);
      status = mpi_check(rc, what);
      done += static_cast<std::size_t>(n);
      displacement += n;
    }
  }
  // Unlock completes the transfers at both ends, so a stored stash is really out.
  const Status unlocked = mpi_check(MPI_Win_unlock(peer_, window_), what + " (unlock)");
  return status.ok() ? unlocked : status;
}

Status PeerTier::store(std::uint64_t id, const std::vector<Region>& regions) {
  drop(id);
  const std::size_t bytes = total_bytes(regions);
  const std::optional<std::size_t> offset = space_.allocate(bytes);
  if (!offset)
    return error(StatusCode::memory_cap,
                 "stash " + std::to_string(id) + " needs " + format_bytes(bytes) +
                     ", but only " + format_bytes(space_.free_bytes()) + " of the " +
                     format_bytes(space_.capacity()) + " this rank has on rank " +
                     std::to_string(peer_) + " are free (largest piece " +
                     format_bytes(space_.largest_free()) + "): raise the peer capacity");
  Status status = transfer(true, describe(true, id), *offset, regions);
  if (!status.ok()) {
    space_.release(*offset, bytes);
    return status;
  }
  placed_[id] = Placed{*offset, bytes};
  return status;
}

Status PeerTier::load(std::uint64_t id, const std::vector<Region>& regions) {
  auto it = placed_.find(id);
  if (it == placed_.end())
    return error(StatusCode::internal, "peer tier holds no stash " + std::to_string(id));
  if (total_bytes(regions) != it->second.bytes)
    return error(StatusCode::invalid_argument,
                 "stash " + std::to_string(id) + " was stored with " +
                     std::to_string(it->second.bytes) + " bytes, asked back into " +
                     std::to_string(total_bytes(regions)));
  return transfer(false, describe(false, id), it->second.offset, regions);
}

void PeerTier::drop(std::uint64_t id) {
  auto it = placed_.find(id);
  if (it == placed_.end()) return;
  space_.release(it->second.offset, it->second.bytes);
  placed_.erase(it);
}

Result<std::unique_ptr<Tier>> make_peer_tier(MPI_Comm comm, int peer, std::size_t capacity_bytes) {
  SPW_ASSIGN_OR_RETURN(auto tier, PeerTier::create(comm, peer, capacity_bytes));
  return std::unique_ptr<Tier>(std::move(tier));
}

}  // namespace spw::offload
