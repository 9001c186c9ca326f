#include "runtime/synthetic_data.hpp"

#include <cmath>
#include <numbers>
#include <string>

namespace spw {
namespace {

constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
// Separates the label draw from the feature draws of the same sample.
constexpr std::uint64_t kLabelStream = 0x6c6162656c73ULL;

// The splitmix64 output function: a bijection that scatters nearby inputs, so consecutive
// steps, samples and elements give unrelated values.
std::uint64_t mix(std::uint64_t x) {
  x += kGolden;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::uint64_t sample_key(std::uint64_t seed, std::int64_t step, std::int64_t sample) {
  return mix(mix(mix(seed) ^ static_cast<std::uint64_t>(step)) ^
             static_cast<std::uint64_t>(sample));
}

// Element j of a sample: the splitmix64 sequence seeded with the sample's key.
std::uint64_t element(std::uint64_t key, std::int64_t j) {
  return mix(key + static_cast<std::uint64_t>(j) * kGolden);
}

// The top 53 bits as a double in [0, 1).
double unit(std::uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

}  // namespace

void SyntheticTokens::fill_batch(std::int64_t step, std::int64_t first_sample, std::int64_t count,
                                 std::int64_t /*global_batch*/, std::int64_t seq,
                                 std::int32_t* tokens, std::int32_t* targets) const {
  for (std::int64_t row = 0; row < count; ++row) {
    const std::uint64_t key = sample_key(seed_, step, first_sample + row);
    std::int32_t* row_tokens = tokens + row * seq;
    std::int32_t* row_targets = targets + row * seq;
    for (std::int64_t j = 0; j <= seq; ++j) {
      // Multiply-shift of the top 32 bits, uniform over [0, vocab) because mix() is a
      // bijection of uniform input; for vocab 256 it is the top byte.
      const auto token = static_cast<std::int32_t>(((element(key, j) >> 32) * vocab_) >> 32);
      if (j < seq) row_tokens[j] = token;
      if (j > 0) row_targets[j - 1] = token;
    }
  }
}

Result<SyntheticFeatures> SyntheticFeatures::create(std::uint64_t seed, std::int64_t features,
                                                    std::int32_t classes) {
  if (features < 1 || classes < 1) {
    return error(StatusCode::invalid_argument,
                 "synthetic data: features (" + std::to_string(features) + ") and classes (" +
                     std::to_string(classes) + ") must both be at least 1");
  }
  return SyntheticFeatures(seed, features, classes);
}

void SyntheticFeatures::fill_batch(std::int64_t step, std::int64_t first_sample, std::int64_t count,
                                   std::int64_t /*global_batch*/, float* x,
                                   std::int32_t* labels) const {
  for (std::int64_t row = 0; row < count; ++row) {
    const std::uint64_t key = sample_key(seed_, step, first_sample + row);
    float* out = x + row * features_;
    // Box-Muller turns two uniforms into two independent normals; an odd last feature uses
    // only the cosine half.
    for (std::int64_t j = 0; j < features_; j += 2) {
      const double u1 = 1.0 - unit(element(key, j));  // (0, 1]: log stays finite
      const double u2 = unit(element(key, j + 1));
      const double radius = std::sqrt(-2.0 * std::log(u1));
      const double angle = 2.0 * std::numbers::pi * u2;
      out[j] = static_cast<float>(radius * std::cos(angle));
      if (j + 1 < features_) out[j + 1] = static_cast<float>(radius * std::sin(angle));
    }
    // Multiply-shift maps 32 uniform bits onto [0, classes) without a division.
    const std::uint64_t bits = mix(key ^ kLabelStream) >> 32;
    labels[row] = static_cast<std::int32_t>((bits * static_cast<std::uint64_t>(classes_)) >> 32);
  }
}

}  // namespace spw
