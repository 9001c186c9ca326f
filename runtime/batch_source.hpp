// Where a run's samples come from: one interface over the text corpus, Fashion-MNIST and
// synthetic data, so trainers and executors fill microbatches without knowing which.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/status.hpp"
#include "runtime/block.hpp"
#include "runtime/job_config.hpp"
#include "runtime/model.hpp"

namespace spw {

// Host buffers for one microbatch's inputs and targets, reused from step to step.
struct MicrobatchBuffers {
  std::vector<std::int32_t> tokens;
  std::vector<std::int32_t> targets;
  std::vector<float> features;

  MicrobatchData view(std::int64_t samples, std::int64_t seq) const;
  // Sizes the buffers for a microbatch of `samples` samples (counts in elements; the others
  // emptied). A microbatch too large for what the node's memory budget has left, or that the
  // system refuses, is out_of_memory naming the samples, the bytes and the fix (more
  // train.microbatches) instead of std::bad_alloc or the OOM killer. On failure they hold
  // no microbatch (their contents are not to be read).
  Status resize(std::int64_t samples, std::size_t token_count, std::size_t target_count,
                std::size_t feature_count);
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Samples [first, first + count) of the global batch of `step` (of `global_batch`).
  virtual Status fill(std::int64_t step, std::int64_t first, std::int64_t count,
                      std::int64_t global_batch, MicrobatchBuffers& buffers) const = 0;
  // Samples in one pass over the data (the corpus length in sequences for text).
  virtual std::int64_t samples_per_epoch() const = 0;
  // The held-out set, where the data has one (Fashion-MNIST's t10k).
  virtual Result<std::unique_ptr<BatchSource>> test_set() const;
  // A line for logs and reports: what was loaded from where.
  virtual std::string describe() const = 0;
  // A digest of the samples it draws from, equal on two ranks that read the same data
  // (data_digest.hpp; 0 for synthetic data, a function of the job alone).
  virtual std::uint64_t digest() const = 0;
};

// Opens what `data` names for `model`, checking that the two fit (token data for a gpt,
// 784 features and 10 classes for an mlp on Fashion-MNIST). A text corpus with
// data.holdout > 0 gives only its training part.
Result<std::unique_ptr<BatchSource>> open_batch_source(const DataConfig& data,
                                                       const ModelSpec& model,
                                                       std::uint64_t seed);

// The data evaluations run on (EvalConfig): a text corpus's held-out part (invalid_argument
// when data.holdout is 0), Fashion-MNIST's t10k set, or for synthetic data the samples of
// steps from 2^40 on, which no run reaches. Batch k of an evaluation is its fill(k, ...).
Result<std::unique_ptr<BatchSource>> open_evaluation_source(const DataConfig& data,
                                                            const ModelSpec& model,
                                                            std::uint64_t seed);

// Both at once, reading the data once: open_batch_source's source, and with `evaluation`
// open_evaluation_source's (else null).
struct DataSources {
  std::unique_ptr<BatchSource> training;
  std::unique_ptr<BatchSource> evaluation;
};
Result<DataSources> open_data_sources(const DataConfig& data, const ModelSpec& model,
                                      std::uint64_t seed, bool evaluation);

// What a run reads, for its header and report: "X" or, when it evaluates, "X; held out: Y"
// (null evaluation: none opened).
std::string describe_data(const BatchSource& training, const BatchSource* evaluation);

}  // namespace spw
