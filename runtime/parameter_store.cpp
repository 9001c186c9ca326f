#include "runtime/parameter_store.hpp"

#include <cmath>
#include <numbers>

namespace spw {

namespace {
thread_local bool gradients_wanted = true;
}  // namespace

WithoutGradients::WithoutGradients() : previous_(gradients_wanted) { gradients_wanted = false; }
WithoutGradients::~WithoutGradients() { gradients_wanted = previous_; }

Result<std::size_t> ParameterStore::add(std::string name, const Shape& shape,
                                        std::optional<TensorPart> part) {
  auto entry = std::make_unique<Entry>();
  entry->name = std::move(name);
  entry->part = std::move(part);
  SPW_ASSIGN_OR_RETURN(entry->value, Tensor::zeros(shape, MemoryCategory::parameters));
  if (gradients_wanted) {
    SPW_ASSIGN_OR_RETURN(entry->grad, Tensor::zeros(shape, MemoryCategory::gradients));
  }
  entries_.push_back(std::move(entry));
  return entries_.size() - 1;
}

std::vector<NamedParameter> ParameterStore::named() {
  std::vector<NamedParameter> list;
  list.reserve(entries_.size());
  for (auto& e : entries_) list.push_back(NamedParameter{e->name, &e->value, &e->grad, e->part});
  return list;
}

namespace {

// splitmix64: a tiny, well-mixed generator whose output is the same on every platform and
// standard library (std::normal_distribution is not).
struct SplitMix64 {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1): never 0, so log() below is finite.
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }
};

SplitMix64 stream_for(std::uint64_t seed, std::string_view name) {
  std::uint64_t hash = 0xCBF29CE484222325ull;  // FNV-1a of the name
  for (char c : name) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001B3ull;
  }
  SplitMix64 mixer{seed ^ hash};
  return SplitMix64{mixer.next()};
}

}  // namespace

void fill_normal(Tensor& tensor, double stddev, std::uint64_t seed, std::string_view name) {
  SplitMix64 rng = stream_for(seed, name);
  float* p = tensor.data();
  const std::int64_t n = tensor.numel();
  for (std::int64_t i = 0; i < n; i += 2) {
    // Box-Muller: two independent normals from two uniforms.
    const double radius = std::sqrt(-2.0 * std::log(rng.uniform()));
    const double angle = 2.0 * std::numbers::pi * rng.uniform();
    p[i] = static_cast<float>(stddev * radius * std::cos(angle));
    if (i + 1 < n) p[i + 1] = static_cast<float>(stddev * radius * std::sin(angle));
  }
}

void fill_uniform(Tensor& tensor, double bound, std::uint64_t seed, std::string_view name) {
  SplitMix64 rng = stream_for(seed, name);
  float* p = tensor.data();
  for (std::int64_t i = 0; i < tensor.numel(); ++i) {
    p[i] = static_cast<float>(bound * (2.0 * rng.uniform() - 1.0));
  }
}

}  // namespace spw
