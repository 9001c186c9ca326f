// Where evicted stashes live. A tier copies a stash's regions out under an id and back into
// regions of the same sizes; the engine (offload/engine.hpp) calls it from its own thread
// only, one call at a time, so a tier needs no locking of its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/status.hpp"

namespace spw::offload {

// One tensor's memory.
struct Region {
  void* data = nullptr;
  std::size_t bytes = 0;
};

class Tier {
 public:
  virtual ~Tier() = default;
  virtual const char* name() const = 0;  // "host", "file", "peer"
  // Copies the regions out. On failure nothing is kept under `id`.
  virtual Status store(std::uint64_t id, const std::vector<Region>& regions) = 0;
  // Copies the stored stash back into regions of the sizes it was stored with.
  virtual Status load(std::uint64_t id, const std::vector<Region>& regions) = 0;
  // Forgets the stored copy; an id not stored is ignored.
  virtual void drop(std::uint64_t id) = 0;
};

// Sum of the regions' sizes.
std::size_t total_bytes(const std::vector<Region>& regions);

}  // namespace spw::offload
