// First-fit allocation of offsets in a fixed range, for the space a peer rank lends to the
// peer tier: the memory itself is in another process, so only offsets are handed out.
#pragma once

#include <cstddef>
#include <map>
#include <optional>

namespace spw::offload {

class RangeAllocator {
 public:
  static constexpr std::size_t kAlignment = 64;  // whole cache lines for every block

  explicit RangeAllocator(std::size_t capacity);

  // The lowest offset with `bytes` (rounded up to kAlignment) free, or nullopt. Zero bytes
  // take no space and always succeed.
  std::optional<std::size_t> allocate(std::size_t bytes);
  // Gives back what allocate(bytes) returned at `offset`; neighbours merge.
  void release(std::size_t offset, std::size_t bytes);

  std::size_t capacity() const { return capacity_; }
  std::size_t free_bytes() const { return free_bytes_; }
  std::size_t largest_free() const;

 private:
  std::size_t capacity_;
  std::size_t free_bytes_;
  std::map<std::size_t, std::size_t> free_;  // offset -> length, disjoint, not touching
};

}  // namespace spw::offload
