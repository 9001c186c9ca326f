// The per-rank memory ledger: current and peak bytes by category, with an optional hard cap.
// One process is one rank, so there is one ledger per process (MemoryLedger::process()).
// Every tensor allocation reserves its bytes here before touching the allocator, so a run
// that would exceed the cap fails with a message instead of being killed by the OS.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

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
  // unchanged, when the total would pass the cap.
  Status reserve(MemoryCategory category, std::size_t bytes);
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
  mutable std::mutex mutex_;
  LedgerSnapshot state_;
};

// "1.50 GiB", "12.0 MiB", "512 B".
std::string format_bytes(std::size_t bytes);
// Parses "8GiB", "512 MiB", "1.5G", "4096" (bytes). Suffixes are binary (K, M, G, T, with or
// without "iB"/"B"). Fails with a message naming the text.
Result<std::size_t> parse_bytes(const std::string& text);

}  // namespace spw
