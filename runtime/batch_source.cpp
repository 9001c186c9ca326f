#include "runtime/batch_source.hpp"

#include "runtime/fashion_mnist.hpp"
#include "runtime/synthetic_data.hpp"
#include "runtime/text_corpus.hpp"

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
  std::string describe() const override {
    return source_->describe() + " of steps training never reaches";
  }

 private:
  static constexpr std::int64_t kFirstStep = std::int64_t{1} << 40;
  std::unique_ptr<BatchSource> source_;
};

class SyntheticTokenSource final : public BatchSource {
 public:
  SyntheticTokenSource(std::uint64_t seed, std::int64_t seq) : tokens_(seed), seq_(seq) {}

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

 private:
  SyntheticFeatures features_;
};

}  // namespace

Result<std::unique_ptr<BatchSource>> open_batch_source(const DataConfig& data,
                                                       const ModelSpec& model,
                                                       std::uint64_t seed) {
  const bool gpt = model.kind == "gpt";
  switch (data.source) {
    case DataKind::text: {
      if (!gpt) {
        return error(StatusCode::invalid_argument,
                     "data.source \"text\" feeds a gpt, but model.kind is \"mlp\": use "
                     "\"fashion-mnist\" or \"synthetic\"");
      }
      SPW_ASSIGN_OR_RETURN(TextCorpus corpus, TextCorpus::load(data.path, model.gpt.seq));
      if (data.holdout == 0) {
        return std::unique_ptr<BatchSource>(new TokenSource(std::move(corpus), model.gpt.seq));
      }
      SPW_ASSIGN_OR_RETURN(TextCorpus training,
                           corpus.training_part(data.holdout, model.gpt.seq));
      auto source = std::make_unique<TokenSource>(std::move(training), model.gpt.seq);
      source->set_part(" for training");
      return std::unique_ptr<BatchSource>(std::move(source));
    }
    case DataKind::fashion_mnist: {
      if (gpt || model.dims.front() != ImageDataset::kHeight * ImageDataset::kWidth ||
          model.dims.back() != ImageDataset::kClasses) {
        return error(StatusCode::invalid_argument,
                     "data.source \"fashion-mnist\" needs an mlp whose model.dims start at 784 "
                     "and end at 10");
      }
      SPW_ASSIGN_OR_RETURN(ImageDataset images, load_fashion_mnist(data.path, true));
      return std::unique_ptr<BatchSource>(new ImageSource(std::move(images), data.path));
    }
    case DataKind::synthetic: {
      if (gpt) return std::unique_ptr<BatchSource>(new SyntheticTokenSource(seed, model.gpt.seq));
      SPW_ASSIGN_OR_RETURN(
          SyntheticFeatures features,
          SyntheticFeatures::create(seed, model.dims.front(),
                                    static_cast<std::int32_t>(model.dims.back())));
      return std::unique_ptr<BatchSource>(new SyntheticFeatureSource(features));
    }
  }
  return error(StatusCode::internal, "unknown data source");
}

Result<std::unique_ptr<BatchSource>> open_evaluation_source(const DataConfig& data,
                                                            const ModelSpec& model,
                                                            std::uint64_t seed) {
  if (data.source == DataKind::text) {
    if (data.holdout == 0) {
      return error(StatusCode::invalid_argument,
                   "evaluating on text needs held-out text: set data.holdout (0.05 keeps the "
                   "last 5% of the corpus out of training)");
    }
    if (model.kind != "gpt") return open_batch_source(data, model, seed);  // its error
    SPW_ASSIGN_OR_RETURN(TextCorpus corpus, TextCorpus::load(data.path, model.gpt.seq));
    SPW_ASSIGN_OR_RETURN(TextCorpus held_out, corpus.held_out_part(data.holdout, model.gpt.seq));
    auto source = std::make_unique<TokenSource>(std::move(held_out), model.gpt.seq);
    source->set_part(" held out");
    return std::unique_ptr<BatchSource>(std::move(source));
  }
  SPW_ASSIGN_OR_RETURN(auto training, open_batch_source(data, model, seed));
  if (data.source == DataKind::fashion_mnist) return training->test_set();
  return std::unique_ptr<BatchSource>(new FarSteps(std::move(training)));
}

}  // namespace spw
