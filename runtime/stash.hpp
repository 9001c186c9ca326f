// Buffers that outlive one call: what a block keeps from its forward for its backward (one
// Stash per block and microbatch in flight), or a block's reusable scratch space. Each
// numbered slot is allocated on first use and reused while later requests ask for the same
// shape, so a steady-state training step allocates nothing.
//
// A Stash may draw on a spare Stash of the same layout (recycle_from): the pipeline executor
// gives each chunk a spare slot, where a microbatch whose stash has gone to the capacity tier
// (or whose backward is done) leaves its tensors for the next microbatch, whose tensors have
// the same shapes in the same places. The spare holds at most one tensor per place, so it
// never holds more than one microbatch's worth. A request the spare cannot serve first tells
// the owner, which frees parked memory that would otherwise sit beside the new allocation.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>

#include "kernels/memory_category.hpp"
#include "kernels/numa_allocator.hpp"
#include "kernels/status.hpp"
#include "kernels/tensor.hpp"

namespace spw {

class Stash {
 public:
  explicit Stash(MemoryCategory category = MemoryCategory::stash) : category_(category) {}

  // The tensor in `slot`, if it is missing or has another shape taken from the same slot of
  // the spare when that has the shape, else allocated (zeroed, or with FirstTouch::none left
  // untouched for a caller that overwrites it whole) after calling on_miss, unless on_miss
  // parked a tensor there that fits. Its contents are whatever the last user left there.
  Result<Tensor*> get(std::size_t slot, const Shape& shape,
                      FirstTouch first_touch = FirstTouch::parallel_zero);
  // The tensor in `slot`, which an earlier get() must have created.
  Tensor& at(std::size_t slot) { return tensors_[slot]; }
  const Tensor& at(std::size_t slot) const { return tensors_[slot]; }

  std::size_t slot_count() const { return tensors_.size(); }
  std::size_t bytes() const;
  MemoryCategory category() const { return category_; }
  // Frees every slot's memory (the ledger sees it go).
  void release();

  // Where get() looks before allocating, and give_back() leaves memory; `on_miss` runs when
  // a get() must allocate. Both outlive this Stash.
  void recycle_from(Stash* spare, const std::function<void()>* on_miss) {
    spare_ = spare;
    on_miss_ = on_miss;
  }
  // Moves the tensor in `slot` to the same slot of the spare when that is empty, else frees
  // it; either way this slot is empty afterwards.
  void give_back(std::size_t slot);
  void give_back_all();

 private:
  MemoryCategory category_;
  std::deque<Tensor> tensors_;  // growing at the end keeps earlier slots where they are
  Stash* spare_ = nullptr;
  const std::function<void()>* on_miss_ = nullptr;
};

}  // namespace spw
