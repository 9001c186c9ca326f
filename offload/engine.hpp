// The offload engine: one dedicated thread per rank that copies stashes to a tier (evict) and
// back (prefetch) while the compute threads carry on. Requests run one at a time in the
// order they were queued, like the simulator's offload stream, so an evict and a later
// prefetch of the same id need no synchronisation by the caller.
//
// Ownership: the caller keeps a request's regions valid and unchanged until wait(id) or
// done(id) says it finished; only then may it free (after evict) or read (after prefetch)
// them. A failed evict leaves the regions untouched and nothing stored, so the caller can
// keep the stash resident; wait(id) reports the failure.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kernels/status.hpp"
#include "offload/tier.hpp"

namespace spw::offload {

struct EngineOptions {
  bool verify = false;  // CRC32C every region at evict and check it at prefetch
  int bind_pu = -1;     // OS index of the PU to bind the engine thread to; -1: don't bind
};

struct EngineStats {
  std::uint64_t bytes_evicted = 0, bytes_prefetched = 0;  // successful requests only
  double evict_seconds = 0, prefetch_seconds = 0;         // engine-thread time, all requests
  // The engine thread's CPU time on them: below the seconds above by what it spent waiting
  // for its core (shared with compute), for storage or for the peer.
  double evict_cpu_seconds = 0, prefetch_cpu_seconds = 0;
  // Of the prefetch figures: mapping the targets' untouched pages before the copy (populate),
  // work the compute thread did when it zeroed them; the rest is the transfer itself.
  double map_seconds = 0, map_cpu_seconds = 0;
  std::uint64_t evictions = 0, prefetches = 0;
};

// One successful copy to or from the tier (the tier's store or load alone: not the page
// mapping or checksums around it), on the steady clock (CLOCK_MONOTONIC, shared by the
// processes of a node), so copies of the ranks sharing a device can be set side by side.
struct EngineTransfer {
  double start_s = 0, end_s = 0;
  std::uint64_t bytes = 0;
};

class OffloadEngine {
 public:
  // The newest copies kept by transfers(): a bound on memory for long jobs.
  static constexpr std::size_t kKeptTransfers = 4096;
  // invalid_argument without a tier or when bind_pu is not a PU of this node. A thread the
  // OS refuses to bind there runs unbound (bound_pu() -1, binding_note() says why): copies
  // may then compete with compute, but they stay correct.
  static Result<std::unique_ptr<OffloadEngine>> create(std::unique_ptr<Tier> tier,
                                                       const EngineOptions& options);
  // Cancels requests that have not started, finishes the running one, joins the thread and
  // drops every stored stash.
  ~OffloadEngine();
  OffloadEngine(const OffloadEngine&) = delete;
  OffloadEngine& operator=(const OffloadEngine&) = delete;

  // Queues a copy of `regions` to the tier under `id`. invalid_argument at once when `id` is
  // already evicted and not prefetched since, or a region has no data but a size.
  Status evict(std::uint64_t id, std::vector<Region> regions);
  // Queues a copy of stash `id` back into `regions` (same sizes and order as evicted); the
  // tier's copy is dropped after it. invalid_argument at once when `id` is not evicted or
  // the sizes differ. With verify, a CRC32C mismatch is a failure naming the id.
  Status prefetch(std::uint64_t id, std::vector<Region> regions);
  // Blocks until every queued request for `id` finished and returns the first failure among
  // them (reported once). waited_s, if given, gets the seconds blocked.
  Status wait(std::uint64_t id, double* waited_s = nullptr);
  // Non-blocking: no request for `id` is queued or running.
  bool done(std::uint64_t id);

  EngineStats stats() const;
  // The newest kKeptTransfers successful copies, oldest first.
  std::vector<EngineTransfer> transfers() const;
  const Tier& tier() const { return *tier_; }
  // The PU the engine thread is bound to (OS index), or -1 when it is not bound.
  int bound_pu() const { return bound_pu_; }
  // Why a requested binding did not happen; empty when it did or none was asked for.
  const std::string& binding_note() const { return binding_note_; }
  // The PUs (OS indices) the engine thread may run on, as it read them once started; an
  // unbound thread inherits its creator's. Empty when hwloc cannot tell.
  const std::vector<int>& cpus() const { return cpus_; }

 private:
  enum class Kind { evict, prefetch };
  struct Request {
    Kind kind;
    std::uint64_t id;
    std::vector<Region> regions;
    std::uint64_t seq;
  };
  // What the engine knows about one id; erased once idle with nothing stored or to report.
  struct Entry {
    int pending = 0;
    Status first_error;
    bool evicted = false;  // as queued: an evict without a later prefetch
    bool stored = false;   // as executed: the tier holds a copy
    std::uint64_t last_seq = 0;
    std::vector<std::size_t> sizes;     // as evicted
    std::vector<std::uint32_t> crcs;    // with verify, per region
  };

  OffloadEngine(std::unique_ptr<Tier> tier, const EngineOptions& options)
      : tier_(std::move(tier)), options_(options) {}
  Status enqueue(Kind kind, std::uint64_t id, std::vector<Region> regions);
  void run();
  void bind_thread();
  // Run on the engine thread without the lock, on copies of the entry's fields.
  Status execute_evict(const Request& request, std::vector<std::uint32_t>& crcs);
  Status execute_prefetch(const Request& request, bool stored,
                          const std::vector<std::uint32_t>& crcs);
  void finish(const Request& request, Status status, double seconds, double cpu_seconds,
              std::vector<std::uint32_t> crcs);
  void forget_if_idle(std::uint64_t id);
  void keep_transfer(const EngineTransfer& transfer);

  std::unique_ptr<Tier> tier_;
  EngineOptions options_;
  int bound_pu_ = -1;
  std::string binding_note_;
  std::vector<int> cpus_;

  mutable std::mutex mutex_;
  std::condition_variable work_, finished_;
  std::deque<Request> queue_;
  std::unordered_map<std::uint64_t, Entry> entries_;
  std::uint64_t next_seq_ = 1;
  bool stopping_ = false;
  EngineStats stats_;
  std::deque<EngineTransfer> transfers_;
  std::thread thread_;
};

}  // namespace spw::offload
