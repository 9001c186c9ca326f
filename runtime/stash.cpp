#include "runtime/stash.hpp"

namespace spw {

Result<Tensor*> Stash::get(std::size_t slot, const Shape& shape) {
  if (slot >= tensors_.size()) tensors_.resize(slot + 1);
  Tensor& tensor = tensors_[slot];
  if (tensor.allocation() == nullptr || !(tensor.shape() == shape)) {
    tensor = Tensor();  // give the old memory back before asking for more
    SPW_ASSIGN_OR_RETURN(tensor, Tensor::zeros(shape, category_));
  }
  return &tensor;
}

std::size_t Stash::bytes() const {
  std::size_t total = 0;
  for (const Tensor& t : tensors_) total += t.allocation() ? t.allocation()->bytes() : 0;
  return total;
}

void Stash::release() { tensors_.clear(); }

}  // namespace spw
