#include "runtime/batch_source.hpp"

#include <new>
#include <string>

#include "kernels/memory_ledger.hpp"
#include "runtime/data_digest.hpp"
#include "runtime/fashion_mnist.hpp"
#include "runtime/synthetic_data.hpp"
#include "runtime/text_corpus.hpp"
#include "runtime/token_file.hpp"

namespace spw {

MicrobatchData MicrobatchBuffers::view(std::int64_t samples, std::int64_t seq) const {
  MicrobatchData mb;
  mb.samples = samples;
  mb.seq = seq;
  mb.tokens = tokens.empty() ? nullptr : tokens.data();
  mb.targets = targets.empty() ? nullptr : targets.data();
  mb.features = features.empty() ? nullptr : features.data();
  return mb;
}

Status MicrobatchBuffers::resize(std::int64_t samples, std::size_t token_count,
                                 std::size_t target_count, std::size_t feature_count) {
  // Every microbatch of a run comes through here: once the buffers have grown to a
  // microbatch's size, resizing allocates nothing, and there is nothing to check.
  const bool allocates = token_count > tokens.capacity() || target_count > targets.capacity() ||
                         feature_count > features.capacity();
  const std::size_t bytes =
      (token_count + target_count) * sizeof(std::int32_t) + feature_count * sizeof(float);
  const auto refused = [&](const std::string& why) {
    return error(StatusCode::out_of_memory, "a microbatch of " + std::to_string(samples) +
                                                " samples needs " + format_bytes(bytes) +
                                                " for its inputs and targets" + why +
                                                ": raise train.microbatches or lower train.batch");
  };
  if (allocates) {
    const MemoryLedger& ledger = MemoryLedger::process();
    if (const auto headroom = ledger.node_headroom(); headroom && bytes > *headroom) {
      return refused(", more than the " + format_bytes(*headroom) +
                     " this node's memory budget has left (" + ledger.node_budget_text() + ")");
    }
  }
  try {
    tokens.resize(token_count);
    targets.resize(target_count);
    features.resize(feature_count);
  } catch (const std::bad_alloc&) {
    return refused(", which the system refused");
  }
  return Status::success();
}

Result<std::unique_ptr<BatchSource>> BatchSource::test_set() const {
  return error(StatusCode::unsupported, describe() + " has no held-out test set");
}

namespace {

// What a corpus's source says it reads, with its part (" held out", " for training" after a
// split, else empty).
std::string describe_corpus(const TextCorpus& corpus, const std::string& part) {
  return "text corpus " + corpus.path() + " (" + std::to_string(corpus.size()) + " bytes" + part +
         ", " + std::to_string(corpus.file_count()) + " files)";
}
std::string describe_corpus(const TokenFile& file, const std::string& part) {
  return "token file " + file.path() + " (" + std::to_string(file.size()) + " tokens of " +
         std::to_string(file.token_bytes()) + " bytes" +
         (file.has_llmc_header() ? " after llm.c's header" : "") + part + ")";
}

// Windows of a stream of tokens: a TextCorpus or a TokenFile, which draw them alike.
template <class Corpus>
class CorpusSource final : public BatchSource {
 public:
  CorpusSource(Corpus corpus, std::int64_t seq, std::string part)
      : corpus_(std::move(corpus)), seq_(seq), part_(std::move(part)) {}

  Status fill(std::int64_t step, std::int64_t first, std::int64_t count, std::int64_t global_batch,
              MicrobatchBuffers& b) const override {
    const auto positions = static_cast<std::size_t>(count * seq_);
    SPW_TRY(b.resize(count, positions, positions, 0));
    corpus_.fill_batch(step, first, count, global_batch, seq_, b.tokens.data(), b.targets.data());
    return Status::success();
  }
  std::int64_t samples_per_epoch() const override { return corpus_.size() / seq_; }
  std::uint64_t digest() const override { return corpus_.digest(); }
  std::string describe() const override { return describe_corpus(corpus_, part_); }

 private:
  Corpus corpus_;
  std::int64_t seq_;
  std::string part_;
};

// Another source's samples from step 2^40 on: synthetic data has no held-out set, but no run
// takes that many steps, so these samples are never trained on.
class FarSteps final : public BatchSource {
 public:
  explicit FarSteps(std::unique_ptr<BatchSource> source) : source_(std::move(source)) {}

  Status fill(std::int64_t step, std::int64_t first, std::int64_t count,
              std::int64_t global_batch, MicrobatchBuffers& b) const override {
    return source_->fill(kFirstStep + step, first, count, global_batch, b);
  }
  std::int64_t samples_per_epoch() const override { return source_->samples_per_epoch(); }
  std::uint64_t digest() const override { return source_->digest(); }
  std::string describe() const override {
    return source_->describe() + " of steps training never reaches";
  }

 private:
  static constexpr std::int64_t kFirstStep = std::int64_t{1} << 40;
  std::unique_ptr<BatchSource> source_;
};

class SyntheticTokenSource final : public BatchSource {
 public:
  SyntheticTokenSource(std::uint64_t seed, std::int32_t vocab, std::int64_t seq)
      : tokens_(seed, vocab), seq_(seq) {}

  Status fill(std::int64_t step, std::int64_t first, std::int64_t count,
              std::int64_t global_batch, MicrobatchBuffers& b) const override {
    const auto positions = static_cast<std::size_t>(count * seq_);
    SPW_TRY(b.resize(count, positions, positions, 0));
    tokens_.fill_batch(step, first, count, global_batch, seq_, b.tokens.data(), b.targets.data());
    return Status::success();
  }
  std::int64_t samples_per_epoch() const override { return 1 << 20; }
  std::string describe() const override { return "synthetic tokens"; }
  std::uint64_t digest() const override { return 0; }

 private:
  SyntheticTokens tokens_;
  std::int64_t seq_;
};

class ImageSource final : public BatchSource {
 public:
  ImageSource(ImageDataset images, std::string dir)
      : images_(std::move(images)), dir_(std::move(dir)) {}

  Status fill(std::int64_t step, std::int64_t first, std::int64_t count,
              std::int64_t global_batch, MicrobatchBuffers& b) const override {
    SPW_TRY(b.resize(count, 0, static_cast<std::size_t>(count),
                     static_cast<std::size_t>(count * images_.features)));
    images_.fill_batch(step, first, count, global_batch, b.features.data(), b.targets.data());
    return Status::success();
  }
  std::int64_t samples_per_epoch() const override { return images_.rows; }
  std::uint64_t digest() const override {
    const std::uint64_t pixels =
        data_digest(images_.pixels.data(), images_.pixels.size() * sizeof(float));
    return pixels ^
           (data_digest(images_.labels.data(), images_.labels.size() * sizeof(std::int32_t)) * 31);
  }
  Result<std::unique_ptr<BatchSource>> test_set() const override {
    SPW_ASSIGN_OR_RETURN(ImageDataset test, load_fashion_mnist(dir_, false));
    return std::unique_ptr<BatchSource>(new ImageSource(std::move(test), dir_));
  }
  std::string describe() const override {
    return "Fashion-MNIST " + images_.images_path + " (" + std::to_string(images_.rows) +
           " images)";
  }

 private:
  ImageDataset images_;
  std::string dir_;
};

class SyntheticFeatureSource final : public BatchSource {
 public:
  explicit SyntheticFeatureSource(SyntheticFeatures features) : features_(features) {}

  Status fill(std::int64_t step, std::int64_t first, std::int64_t count,
              std::int64_t global_batch, MicrobatchBuffers& b) const override {
    SPW_TRY(b.resize(count, 0, static_cast<std::size_t>(count),
                     static_cast<std::size_t>(count * features_.features())));
    features_.fill_batch(step, first, count, global_batch, b.features.data(), b.targets.data());
    return Status::success();
  }
  std::int64_t samples_per_epoch() const override { return 1 << 20; }
  std::string describe() const override { return "synthetic features"; }
  std::uint64_t digest() const override { return 0; }

 private:
  SyntheticFeatures features_;
};

}  // namespace

namespace {

// Whether `data` can feed `model`: token data for a gpt, 784 features and 10 classes for an
// mlp on Fashion-MNIST.
Status check_fits(const DataConfig& data, const ModelSpec& model) {
  const bool gpt = model.kind == "gpt";
  if (is_token_corpus(data.source) && !gpt) {
    return error(StatusCode::invalid_argument,
                 "data.source \"" + std::string(to_string(data.source)) +
                     "\" feeds a gpt, but model.kind is \"mlp\": use \"fashion-mnist\" or "
                     "\"synthetic\"");
  }
  if (data.source == DataKind::fashion_mnist &&
      (gpt || model.dims.front() != ImageDataset::kHeight * ImageDataset::kWidth ||
       model.dims.back() != ImageDataset::kClasses)) {
    return error(StatusCode::invalid_argument,
                 "data.source \"fashion-mnist\" needs an mlp whose model.dims start at 784 "
                 "and end at 10");
  }
  return Status::success();
}

// The held-out part of a text corpus or token file for evaluation, and the rest (or, without a
// holdout, all of it) for training.
template <class Corpus>
Status add_corpus_sources(Corpus corpus, double holdout, std::int64_t seq, bool training,
                          bool evaluation, DataSources& out) {
  using Source = CorpusSource<Corpus>;
  if (evaluation) {
    SPW_ASSIGN_OR_RETURN(Corpus held_out, corpus.held_out_part(holdout, seq));
    out.evaluation = std::make_unique<Source>(std::move(held_out), seq, " held out");
  }
  if (!training) return Status::success();
  if (holdout == 0) {
    out.training = std::make_unique<Source>(std::move(corpus), seq, "");
    return Status::success();
  }
  SPW_ASSIGN_OR_RETURN(Corpus part, corpus.training_part(holdout, seq));
  out.training = std::make_unique<Source>(std::move(part), seq, " for training");
  return Status::success();
}

Result<std::unique_ptr<BatchSource>> synthetic_source(const ModelSpec& model,
                                                      std::uint64_t seed) {
  if (model.kind == "gpt") {
    return std::unique_ptr<BatchSource>(
        new SyntheticTokenSource(seed, model.gpt.vocab, model.gpt.seq));
  }
  SPW_ASSIGN_OR_RETURN(SyntheticFeatures features,
                       SyntheticFeatures::create(seed, model.dims.front(),
                                                 static_cast<std::int32_t>(model.dims.back())));
  return std::unique_ptr<BatchSource>(new SyntheticFeatureSource(features));
}

// The sources asked for, each file read once: a text corpus is split in memory, a token file
// is mapped once for both parts, and Fashion-MNIST's evaluation reads its t10k files alone.
Result<DataSources> open_sources(const DataConfig& data, const ModelSpec& model,
                                 std::uint64_t seed, bool training, bool evaluation) {
  if (evaluation && is_token_corpus(data.source) && data.holdout == 0) {
    const std::string what = data.source == DataKind::text ? "text" : "tokens";
    return error(StatusCode::invalid_argument,
                 "evaluating on " + what + " needs held-out " + what +
                     ": set data.holdout (0.05 keeps the last 5% of the corpus out of training)");
  }
  SPW_TRY(check_fits(data, model));
  DataSources out;
  switch (data.source) {
    case DataKind::text: {
      const std::int64_t seq = model.gpt.seq;
      SPW_ASSIGN_OR_RETURN(TextCorpus corpus, TextCorpus::load(data.path, seq));
      SPW_TRY(add_corpus_sources(std::move(corpus), data.holdout, seq, training, evaluation, out));
      return out;
    }
    case DataKind::tokens: {
      const std::int64_t seq = model.gpt.seq;
      SPW_ASSIGN_OR_RETURN(TokenFile file,
                           TokenFile::open(data.path, data.token_bytes, model.gpt.vocab, seq));
      SPW_TRY(add_corpus_sources(std::move(file), data.holdout, seq, training, evaluation, out));
      return out;
    }
    case DataKind::fashion_mnist: {
      if (training) {
        SPW_ASSIGN_OR_RETURN(ImageDataset images, load_fashion_mnist(data.path, true));
        out.training = std::make_unique<ImageSource>(std::move(images), data.path);
      }
      if (evaluation) {
        SPW_ASSIGN_OR_RETURN(ImageDataset images, load_fashion_mnist(data.path, false));
        out.evaluation = std::make_unique<ImageSource>(std::move(images), data.path);
      }
      return out;
    }
    case DataKind::synthetic: {
      if (training) {
        SPW_ASSIGN_OR_RETURN(out.training, synthetic_source(model, seed));
      }
      if (evaluation) {
        SPW_ASSIGN_OR_RETURN(auto stream, synthetic_source(model, seed));
        out.evaluation = std::make_unique<FarSteps>(std::move(stream));
      }
      return out;
    }
  }
  return error(StatusCode::internal, "unknown data source");
}

}  // namespace

std::string describe_data(const BatchSource& training, const BatchSource* evaluation) {
  std::string text = training.describe();
  if (evaluation != nullptr) text += "; held out: " + evaluation->describe();
  return text;
}

Result<std::unique_ptr<BatchSource>> open_batch_source(const DataConfig& data,
                                                       const ModelSpec& model,
                                                       std::uint64_t seed) {
  SPW_ASSIGN_OR_RETURN(DataSources sources, open_sources(data, model, seed, true, false));
  return std::move(sources.training);
}

Result<std::unique_ptr<BatchSource>> open_evaluation_source(const DataConfig& data,
                                                            const ModelSpec& model,
                                                            std::uint64_t seed) {
  SPW_ASSIGN_OR_RETURN(DataSources sources, open_sources(data, model, seed, false, true));
  return std::move(sources.evaluation);
}

Result<DataSources> open_data_sources(const DataConfig& data, const ModelSpec& model,
                                      std::uint64_t seed, bool evaluation) {
  return open_sources(data, model, seed, true, evaluation);
}

}  // namespace spw
