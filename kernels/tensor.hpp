// Tensor: a dense, row-major fp32 array. Owning tensors hold rank memory (see
// numa_allocator.hpp) under a ledger category; views share or borrow that memory.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "memory_category.hpp"
#include "numa_allocator.hpp"
#include "status.hpp"

namespace spw {

class Shape {
 public:
  static constexpr int kMaxRank = 4;

  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims);

  int rank() const { return rank_; }
  std::int64_t operator[](int i) const { return dims_[static_cast<std::size_t>(i)]; }
  std::int64_t numel() const;
  // Product of all but the last dimension: the row count of a [rows, cols] matrix view.
  std::int64_t rows() const;
  std::int64_t cols() const { return rank_ == 0 ? 1 : dims_[static_cast<std::size_t>(rank_ - 1)]; }
  bool operator==(const Shape& other) const;
  std::string to_string() const;  // "[16, 128, 256]"

 private:
  std::array<std::int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

class Tensor {
 public:
  Tensor() = default;

  // A zero-filled tensor placed and first-touched as the allocator does, accounted under
  // `category`. Fails on negative dimensions, the memory cap, or out-of-memory.
  static Result<Tensor> zeros(const Shape& shape, MemoryCategory category,
                              MemoryPlacement placement = {});
  // As zeros, but with the pages left untouched and the contents undefined: for memory that
  // is overwritten whole at once (a stash coming back from the offload tier), so the caller's
  // thread does not zero it first.
  static Result<Tensor> uninitialized(const Shape& shape, MemoryCategory category,
                                      MemoryPlacement placement = {});
  // A non-owning view of caller memory (the caller keeps it alive).
  static Tensor borrow(float* data, const Shape& shape);

  float* data() { return data_; }
  const float* data() const { return data_; }
  const Shape& shape() const { return shape_; }
  std::int64_t numel() const { return shape_.numel(); }
  std::int64_t dim(int i) const { return shape_[i]; }
  int rank() const { return shape_.rank(); }
  std::size_t bytes() const { return static_cast<std::size_t>(numel()) * sizeof(float); }
  bool empty() const { return data_ == nullptr || numel() == 0; }
  // The allocation behind an owning tensor or a view of one; null for borrowed memory.
  const Allocation* allocation() const { return storage_.get(); }

  // The same memory under another shape with as many elements.
  Result<Tensor> reshaped(const Shape& shape) const;
  // Rows [begin, begin + count) of the leading dimension, sharing memory.
  Result<Tensor> rows(std::int64_t begin, std::int64_t count) const;

  void fill(float value);
  // Copies the elements of `source`, which must have the same number of elements.
  Status copy_from(const Tensor& source);

 private:
  static Result<Tensor> allocated(const Shape& shape, MemoryCategory category,
                                  MemoryPlacement placement, FirstTouch first_touch);

  std::shared_ptr<Allocation> storage_;
  float* data_ = nullptr;
  Shape shape_;
};

}  // namespace spw
