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

class MemoryLedger {
 public:
  MemoryLedger() = default;
  MemoryLedger(const MemoryLedger&) = delete;
  MemoryLedger& operator=(const MemoryLedger&) = delete;

  // The ledger of this process (rank).
  static MemoryLedger& process();

  // Accounts `bytes` for `category`. Fails with StatusCode::memory_cap, leaving the ledger
  // unchanged, when the total would pass the cap even after the pressure handler (if one is
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

  LedgerSnapshot snapshot() const;
  std::size_t current_total() const;
  std::size_t peak_total() const;
  std::size_t reserved_total() const;
  // Starts a new high-water mark from what is in use now (e.g. after warm-up).
  void reset_peaks();

 private:
  Status reserve_locked(MemoryCategory category, std::size_t bytes);

  mutable std::mutex mutex_;
  LedgerSnapshot state_;
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
