// The per-rank memory ledger: current and peak bytes by category, with an optional hard cap.
// One process is one rank, so there is one ledger per process (MemoryLedger::process()).
// Every tensor allocation reserves its bytes here before touching the allocator, so a run
// that would exceed the cap fails with a message instead of being killed by the OS.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "memory_category.hpp"
#include "status.hpp"

namespace spw {

struct LedgerSnapshot {
  std::array<std::size_t, kMemoryCategoryCount> current{};
  std::array<std::size_t, kMemoryCategoryCount> peak{};  // each category's own high-water mark
  std::size_t current_total = 0;
  std::size_t peak_total = 0;  // high-water mark of the sum, not the sum of the peaks
  // Every byte reserved so far, freed since or not: how much memory was allocated (mapped
  // anew), which a step that reuses its buffers keeps flat.
  std::size_t reserved_total = 0;
  std::optional<std::size_t> cap;

  std::size_t current_of(MemoryCategory c) const { return current[static_cast<int>(c)]; }
  std::size_t peak_of(MemoryCategory c) const { return peak[static_cast<int>(c)]; }
};

// What the machine lets the ranks of one node hold together, beside the job's own cap. The
// node's ranks share one counter (in shared memory), so a rank fails with a message when
// the ranks together would touch more than the node has, instead of the kernel's OOM
// killer ending one of them without a word. The ledger counts only tensors, so this
// catches what cannot fit, not everything that might not.
struct NodeMemoryBudget {
  std::size_t bytes = 0;  // what the node's ranks may hold together
  std::string source;     // how that figure was found, for the message
  int ranks = 1;          // how many ranks share the counter
  // The node's ranks' reserved bytes together, read and written only atomically
  // (std::atomic_ref), 8-byte aligned, alive while the budget is set.
  std::uint64_t* shared_in_use = nullptr;
};

class MemoryLedger {
 public:
  MemoryLedger() = default;
  MemoryLedger(const MemoryLedger&) = delete;
  MemoryLedger& operator=(const MemoryLedger&) = delete;

  // The ledger of this process (rank).
  static MemoryLedger& process();

  // Accounts `bytes` for `category`. Fails, leaving the ledger unchanged, when the total
  // would pass the cap (StatusCode::memory_cap) or the node's ranks together would pass the
  // node budget (StatusCode::out_of_memory) even after the pressure handler (if one is
  // installed for the calling thread) had its chance to free memory.
  Status reserve(MemoryCategory category, std::size_t bytes);

  // Called when a reservation of `bytes` on the installing thread would pass the cap, with
  // the ledger unlocked; it may release memory (wait for copies in flight that will free
  // some), after which the reservation is tried once more. Reservations made from inside it
  // do not call it again. Other threads (OpenMP workers, the offload engine) never call it:
  // a handler that waits on the engine must not run on the engine's own thread.
  using PressureHandler = std::function<void(std::size_t bytes)>;
  // Installs `handler` for the calling thread under `owner`, replacing any other.
  void set_pressure_handler(const void* owner, PressureHandler handler);
  // Removes the handler if `owner` installed it; another owner's stays.
  void clear_pressure_handler(const void* owner);
  // Gives back bytes reserved earlier. Releasing more than is held is a bug: it clamps to zero.
  void release(MemoryCategory category, std::size_t bytes);

  // Sets or clears the cap. Fails (cap unchanged) if more than `cap` bytes are already in use.
  Status set_cap(std::optional<std::size_t> cap);
  std::optional<std::size_t> cap() const;

  // Shares this ledger's reservations with the node's other ranks under `budget`, adding
  // what it holds now to the shared counter; nullopt takes them back out. Whoever sets a
  // budget clears it before its counter goes away. invalid_argument (budget unchanged) for
  // a null or misaligned counter.
  Status set_node_budget(std::optional<NodeMemoryBudget> budget);
  bool has_node_budget() const;
  // Whether `bytes` more would fit the node budget now, reserving nothing: a check before a
  // long run of allocations (a model's parameters) that fails in a moment where the
  // allocations would fail only after touching all the memory the node has.
  // out_of_memory naming `what` when they would not; success without a budget.
  Status check_node_headroom(std::size_t bytes, const std::string& what) const;
  // What the node's ranks may still reserve together, and the budget's description
  // ("21.1 GiB, SOURCE"); nullopt and "" without a budget.
  std::optional<std::size_t> node_headroom() const;
  std::string node_budget_text() const;

  LedgerSnapshot snapshot() const;
  std::size_t current_total() const;
  std::size_t peak_total() const;
  std::size_t reserved_total() const;
  // Starts a new high-water mark from what is in use now (e.g. after warm-up).
  void reset_peaks();

 private:
  Status reserve_locked(MemoryCategory category, std::size_t bytes);
  bool over_node_budget_locked(std::size_t bytes) const;
  Status take_from_node_budget_locked(MemoryCategory category, std::size_t bytes);
  Status node_budget_exceeded_locked(const std::string& what, std::uint64_t held) const;

  mutable std::mutex mutex_;
  LedgerSnapshot state_;
  std::optional<NodeMemoryBudget> node_budget_;
  PressureHandler pressure_handler_;
  const void* pressure_owner_ = nullptr;
  std::thread::id pressure_thread_;
  bool relieving_ = false;
};

// "1.50 GiB", "12.0 MiB", "512 B".
std::string format_bytes(std::size_t bytes);
// Parses "8GiB", "512 MiB", "1.5G", "4096" (bytes). Suffixes are binary (K, M, G, T, with or
// without "iB"/"B"). Fails with a message naming the text.
Result<std::size_t> parse_bytes(const std::string& text);

}  // namespace spw
