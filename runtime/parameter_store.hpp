// The parameters of one block and their gradients, under stable addresses and PyTorch names.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/status.hpp"
#include "kernels/tensor.hpp"
#include "runtime/parameters.hpp"

namespace spw {

class ParameterStore {
 public:
  // Adds a zero parameter and its zero gradient (no gradient inside a WithoutGradients
  // scope); returns its index. `part`: the parameter is those rows of a bigger tensor
  // (parameters.hpp).
  Result<std::size_t> add(std::string name, const Shape& shape,
                          std::optional<TensorPart> part = std::nullopt);

  Tensor& value(std::size_t i) { return entries_[i]->value; }
  Tensor& grad(std::size_t i) { return entries_[i]->grad; }
  const std::string& name(std::size_t i) const { return entries_[i]->name; }
  const std::optional<TensorPart>& part(std::size_t i) const { return entries_[i]->part; }
  std::size_t size() const { return entries_.size(); }
  std::vector<NamedParameter> named();

 private:
  struct Entry {
    std::string name;
    Tensor value;
    Tensor grad;
    std::optional<TensorPart> part;
  };
  std::vector<std::unique_ptr<Entry>> entries_;
};

// While one lives, stores created on this thread give their parameters no gradient tensor:
// a copy of a stage that only runs forwards (PipeFB's forward rank) never needs one. Blocks
// own their stores, so a scope reaches them all without a flag through every constructor.
class WithoutGradients {
 public:
  WithoutGradients();
  ~WithoutGradients();
  WithoutGradients(const WithoutGradients&) = delete;
  WithoutGradients& operator=(const WithoutGradients&) = delete;

 private:
  bool previous_;
};

// Deterministic initialisation, each parameter from its own random stream seeded by
// (seed, name): the values do not depend on which blocks share a rank.
void fill_normal(Tensor& tensor, double stddev, std::uint64_t seed, std::string_view name);
void fill_uniform(Tensor& tensor, double bound, std::uint64_t seed, std::string_view name);

}  // namespace spw
