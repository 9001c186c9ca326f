#include "runtime/stash.hpp"

#include <utility>

namespace spw {

Result<Tensor*> Stash::get(std::size_t slot, const Shape& shape, FirstTouch first_touch) {
  if (slot >= tensors_.size()) tensors_.resize(slot + 1);
  Tensor& tensor = tensors_[slot];
  if (tensor.allocation() != nullptr && tensor.shape() == shape) return &tensor;
  tensor = Tensor();  // give the old memory back before asking for more
  if (spare_ != nullptr) {
    const auto take_parked = [&] {
      if (slot >= spare_->tensors_.size()) return false;
      Tensor& parked = spare_->tensors_[slot];
      if (parked.allocation() == nullptr || !(parked.shape() == shape)) return false;
      tensor = std::exchange(parked, Tensor());
      return true;
    };
    if (take_parked()) return &tensor;
    (*on_miss_)();
    if (take_parked()) return &tensor;  // on_miss may have parked memory that just came free
  }
  SPW_ASSIGN_OR_RETURN(tensor, first_touch == FirstTouch::none
                                   ? Tensor::uninitialized(shape, category_)
                                   : Tensor::zeros(shape, category_));
  return &tensor;
}

std::size_t Stash::bytes() const {
  std::size_t total = 0;
  for (const Tensor& t : tensors_) total += t.allocation() ? t.allocation()->bytes() : 0;
  return total;
}

void Stash::release() { tensors_.clear(); }

void Stash::give_back(std::size_t slot) {
  if (slot >= tensors_.size()) return;
  Tensor& tensor = tensors_[slot];
  if (tensor.allocation() == nullptr) return;
  if (spare_ != nullptr) {
    if (slot >= spare_->tensors_.size()) spare_->tensors_.resize(slot + 1);
    Tensor& parked = spare_->tensors_[slot];
    if (parked.allocation() == nullptr) {
      parked = std::exchange(tensor, Tensor());
      return;
    }
  }
  tensor = Tensor();
}

void Stash::give_back_all() {
  for (std::size_t i = 0; i < tensors_.size(); ++i) give_back(i);
}

}  // namespace spw
