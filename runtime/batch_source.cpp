#include "runtime/batch_source.hpp"

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

Result<std::unique_ptr<BatchSource>> BatchSource::test_set() const {
  return error(StatusCode::unsupported, describe() + " has no held-out test set");
}

namespace {

class TokenSource final : public BatchSource {
 public:
  TokenSource(TextCorpus corpus, std::int64_t seq) : corpus_(std::move(corpus)), seq_(seq) {}

  Status fill(std::int64_t step, std::int64_t first, std::int64_t count,
              std::int64_t global_batch, MicrobatchBuffers& b) const override {
    b.tokens.resize(static_cast<std::size_t>(count * seq_));
    b.targets.resize(b.tokens.size());
    b.features.clear();
    corpus_.fill_batch(step, first, count, global_batch, seq_, b.tokens.data(), b.targets.data());
    return Status::success();
  }
  std::int64_t samples_per_epoch() const override { return corpus_.size() / seq_; }
  std::uint64_t digest() const override { return corpus_.digest(); }
  std::string describe() const override {
    return "text corpus " + corpus_.path() + " (" + std::to_string(corpus_.size()) + " bytes" +
           part_ + ", " + std::to_string(corpus_.file_count()) + " files)";
  }
  void set_part(std::string part) { part_ = std::move(part); }

 private:
  TextCorpus corpus_;
  std::int64_t seq_;
  std::string part_;  // " held out", " for training" after a split, else empty
};

class TokenFileSource final : public BatchSource {
 public:
  TokenFileSource(TokenFile file, std::int64_t seq, std::string part)
      : file_(std::move(file)), seq_(seq), part_(std::move(part)) {}

  Status fill(std::int64_t step, std::int64_t first, std::int64_t count, std::int64_t global_batch,
              MicrobatchBuffers& b) const override {
    b.tokens.resize(static_cast<std::size_t>(count * seq_));
    b.targets.resize(b.tokens.size());
    b.features.clear();
    file_.fill_batch(step, first, count, global_batch, seq_, b.tokens.data(), b.targets.data());
    return Status::success();
  }
  std::int64_t samples_per_epoch() const override { return file_.size() / seq_; }
  std::uint64_t digest() const override { return file_.digest(); }
  std::string describe() const override {
    return "token file " + file_.path() + " (" + std::to_string(file_.size()) + " tokens of " +
           std::to_string(file_.token_bytes()) + " bytes" + part_ + ")";
  }

 private:
  TokenFile file_;
  std::int64_t seq_;
  std::string part_;  // " held out", " for training" after a split, else empty
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
    b.tokens.resize(static_cast<std::size_t>(count * seq_));
    b.targets.resize(b.tokens.size());
    b.features.clear();
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
    b.features.resize(static_cast<std::size_t>(count * images_.features));
    b.targets.resize(static_cast<std::size_t>(count));
    b.tokens.clear();
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
    b.features.resize(static_cast<std::size_t>(count * features_.features()));
    b.targets.resize(static_cast<std::size_t>(count));
    b.tokens.clear();
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

std::unique_ptr<BatchSource> token_source(TextCorpus corpus, std::int64_t seq,
                                          std::string part) {
  auto source = std::make_unique<TokenSource>(std::move(corpus), seq);
  source->set_part(std::move(part));
  return source;
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
      if (evaluation) {
        SPW_ASSIGN_OR_RETURN(TextCorpus held_out, corpus.held_out_part(data.holdout, seq));
        out.evaluation = token_source(std::move(held_out), seq, " held out");
      }
      if (training && data.holdout == 0) out.training = token_source(std::move(corpus), seq, "");
      if (training && data.holdout > 0) {
        SPW_ASSIGN_OR_RETURN(TextCorpus part, corpus.training_part(data.holdout, seq));
        out.training = token_source(std::move(part), seq, " for training");
      }
      return out;
    }
    case DataKind::tokens: {
      const std::int64_t seq = model.gpt.seq;
      SPW_ASSIGN_OR_RETURN(TokenFile file,
                           TokenFile::open(data.path, data.token_bytes, model.gpt.vocab, seq));
      if (evaluation) {
        SPW_ASSIGN_OR_RETURN(TokenFile held_out, file.held_out_part(data.holdout, seq));
        out.evaluation = std::make_unique<TokenFileSource>(std::move(held_out), seq, " held out");
      }
      if (training && data.holdout == 0) {
        out.training = std::make_unique<TokenFileSource>(std::move(file), seq, "");
      }
      if (training && data.holdout > 0) {
        SPW_ASSIGN_OR_RETURN(TokenFile part, file.training_part(data.holdout, seq));
        out.training = std::make_unique<TokenFileSource>(std::move(part), seq, " for training");
      }
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
