// Buffers that outlive one call: what a block keeps from its forward for its backward (one
// Stash per block and microbatch in flight), or a block's reusable scratch space. Each
// numbered slot is allocated on first use and reused while later requests ask for the same
// shape, so a steady-state training step allocates nothing.
#pragma once

#include <cstddef>
#include <deque>

#include "kernels/memory_category.hpp"
#include "kernels/status.hpp"
#include "kernels/tensor.hpp"

namespace spw {

class Stash {
 public:
  explicit Stash(MemoryCategory category = MemoryCategory::stash) : category_(category) {}

  // The tensor in `slot`, (re)allocated if it is missing or has another shape. Its contents
  // are whatever the last user left there.
  Result<Tensor*> get(std::size_t slot, const Shape& shape);
  // The tensor in `slot`, which an earlier get() must have created.
  Tensor& at(std::size_t slot) { return tensors_[slot]; }
  const Tensor& at(std::size_t slot) const { return tensors_[slot]; }

  std::size_t slot_count() const { return tensors_.size(); }
  std::size_t bytes() const;
  MemoryCategory category() const { return category_; }
  // Frees every slot's memory (the ledger sees it go).
  void release();

 private:
  MemoryCategory category_;
  std::deque<Tensor> tensors_;  // growing at the end keeps earlier slots where they are
};

}  // namespace spw
