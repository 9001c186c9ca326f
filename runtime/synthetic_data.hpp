// Synthetic batches for benchmarks: throughput runs need data with the right shapes that costs
// nothing to load and is identical on every machine. Each sample is a pure function of
// (seed, step, sample index), hashed with splitmix64, so any rank can produce any slice of a
// batch and the rows match those of the whole batch filled at once. There is nothing to learn
// from this data: the loss stays near ln(vocab) or ln(classes).
#pragma once

#include <cstdint>

#include "kernels/status.hpp"

namespace spw {

// GPT batches: tokens uniform in [0, vocab).
class SyntheticTokens {
 public:
  SyntheticTokens(std::uint64_t seed, std::int32_t vocab) : seed_(seed), vocab_(vocab) {}

  // Samples first_sample .. first_sample + count - 1 of `step`, row-major [count, seq]. Each
  // sample is a run of seq + 1 tokens; inputs are its first seq and targets its last seq, the
  // same one-token shift as TextCorpus. global_batch is unused (a sample does not depend on
  // the batch size); it keeps the signature that of TextCorpus::fill_batch.
  void fill_batch(std::int64_t step, std::int64_t first_sample, std::int64_t count,
                  std::int64_t global_batch, std::int64_t seq, std::int32_t* tokens,
                  std::int32_t* targets) const;

 private:
  std::uint64_t seed_;
  std::uint64_t vocab_;
};

// mlp batches: features drawn from N(0, 1) (Box-Muller), labels uniform in [0, classes).
class SyntheticFeatures {
 public:
  // invalid_argument unless features >= 1 and classes >= 1.
  static Result<SyntheticFeatures> create(std::uint64_t seed, std::int64_t features,
                                          std::int32_t classes);

  // Writes count rows of features() floats to x and count labels; global_batch is unused, as
  // in SyntheticTokens, to keep the signature that of ImageDataset::fill_batch.
  void fill_batch(std::int64_t step, std::int64_t first_sample, std::int64_t count,
                  std::int64_t global_batch, float* x, std::int32_t* labels) const;

  std::int64_t features() const { return features_; }
  std::int32_t classes() const { return classes_; }

 private:
  SyntheticFeatures(std::uint64_t seed, std::int64_t features, std::int32_t classes)
      : seed_(seed), features_(features), classes_(classes) {}

  std::uint64_t seed_;
  std::int64_t features_;
  std::int32_t classes_;
};

}  // namespace spw
