#include "offload/range_allocator.hpp"

#include <algorithm>
#include <iterator>

namespace spw::offload {

namespace {
std::size_t aligned(std::size_t bytes) {
  return (bytes + RangeAllocator::kAlignment - 1) / RangeAllocator::kAlignment *
         RangeAllocator::kAlignment;
}
}  // namespace

// The tail below an alignment boundary could never hold an aligned block.
RangeAllocator::RangeAllocator(std::size_t capacity)
    : capacity_(capacity / kAlignment * kAlignment), free_bytes_(capacity_) {
  if (capacity_ > 0) free_[0] = capacity_;
}

std::optional<std::size_t> RangeAllocator::allocate(std::size_t bytes) {
  if (bytes == 0) return std::size_t{0};
  const std::size_t need = aligned(bytes);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    const std::size_t offset = it->first;
    const std::size_t rest = it->second - need;
    free_.erase(it);
    if (rest > 0) free_[offset + need] = rest;
    free_bytes_ -= need;
    return offset;
  }
  return std::nullopt;
}

void RangeAllocator::release(std::size_t offset, std::size_t bytes) {
  if (bytes == 0) return;
  std::size_t length = aligned(bytes);
  free_bytes_ += length;
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && offset + length == next->first) {
    length += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += length;
      return;
    }
  }
  free_[offset] = length;
}

std::size_t RangeAllocator::largest_free() const {
  std::size_t largest = 0;
  for (const auto& [offset, length] : free_) largest = std::max(largest, length);
  return largest;
}

}  // namespace spw::offload
