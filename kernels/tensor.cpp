#include "tensor.hpp"

#include <algorithm>
#include <cstring>

namespace spw {

Shape::Shape(std::initializer_list<std::int64_t> dims) {
  rank_ = static_cast<int>(std::min<std::size_t>(dims.size(), kMaxRank));
  std::copy_n(dims.begin(), rank_, dims_.begin());
}

std::int64_t Shape::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[static_cast<std::size_t>(i)];
  return n;
}

std::int64_t Shape::rows() const {
  std::int64_t n = 1;
  for (int i = 0; i + 1 < rank_; ++i) n *= dims_[static_cast<std::size_t>(i)];
  return n;
}

bool Shape::operator==(const Shape& other) const {
  if (rank_ != other.rank_) return false;
  for (int i = 0; i < rank_; ++i) {
    if (dims_[static_cast<std::size_t>(i)] != other.dims_[static_cast<std::size_t>(i)])
      return false;
  }
  return true;
}

std::string Shape::to_string() const {
  std::string text = "[";
  for (int i = 0; i < rank_; ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(dims_[static_cast<std::size_t>(i)]);
  }
  return text + "]";
}

Result<Tensor> Tensor::zeros(const Shape& shape, MemoryCategory category,
                             MemoryPlacement placement) {
  return allocated(shape, category, placement, FirstTouch::parallel_zero);
}

Result<Tensor> Tensor::uninitialized(const Shape& shape, MemoryCategory category,
                                     MemoryPlacement placement) {
  return allocated(shape, category, placement, FirstTouch::none);
}

Result<Tensor> Tensor::allocated(const Shape& shape, MemoryCategory category,
                                 MemoryPlacement placement, FirstTouch first_touch) {
  for (int i = 0; i < shape.rank(); ++i) {
    if (shape[i] < 0) {
      return error(StatusCode::invalid_argument,
                   "tensor shape " + shape.to_string() + " has a negative dimension");
    }
  }
  const auto bytes = static_cast<std::size_t>(shape.numel()) * sizeof(float);
  SPW_ASSIGN_OR_RETURN(auto allocation,
                       allocate(bytes, category, placement, first_touch));
  Tensor tensor;
  tensor.data_ = static_cast<float*>(allocation->data());
  tensor.storage_ = std::move(allocation);
  tensor.shape_ = shape;
  return tensor;
}

Tensor Tensor::borrow(float* data, const Shape& shape) {
  Tensor tensor;
  tensor.data_ = data;
  tensor.shape_ = shape;
  return tensor;
}

Result<Tensor> Tensor::reshaped(const Shape& shape) const {
  if (shape.numel() != numel()) {
    return error(StatusCode::shape_mismatch, "cannot view tensor " + shape_.to_string() +
                                                 " as " + shape.to_string() +
                                                 ": element counts differ");
  }
  Tensor view = *this;
  view.shape_ = shape;
  return view;
}

Result<Tensor> Tensor::rows(std::int64_t begin, std::int64_t count) const {
  if (rank() == 0 || begin < 0 || count < 0 || begin + count > shape_[0]) {
    return error(StatusCode::invalid_argument,
                 "rows [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
                     ") are outside tensor " + shape_.to_string());
  }
  const std::int64_t row_elements = numel() / std::max<std::int64_t>(shape_[0], 1);
  Tensor view = *this;
  view.data_ = data_ + begin * row_elements;
  Shape shape = shape_;
  std::array<std::int64_t, Shape::kMaxRank> dims{};
  for (int i = 0; i < shape.rank(); ++i) dims[static_cast<std::size_t>(i)] = shape[i];
  dims[0] = count;
  switch (shape.rank()) {
    case 1: view.shape_ = Shape{dims[0]}; break;
    case 2: view.shape_ = Shape{dims[0], dims[1]}; break;
    case 3: view.shape_ = Shape{dims[0], dims[1], dims[2]}; break;
    default: view.shape_ = Shape{dims[0], dims[1], dims[2], dims[3]}; break;
  }
  return view;
}

void Tensor::fill(float value) {
  const std::int64_t n = numel();
  float* p = data_;
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < n; ++i) p[i] = value;
}

Status Tensor::copy_from(const Tensor& source) {
  if (source.numel() != numel()) {
    return error(StatusCode::shape_mismatch, "cannot copy tensor " + source.shape().to_string() +
                                                 " into " + shape_.to_string());
  }
  if (numel() > 0) std::memcpy(data_, source.data(), bytes());
  return Status::success();
}

}  // namespace spw
