#include "runtime/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

namespace spw {

int draw_token(const float* logits, int count, double temperature, int top_k, double u) {
  std::vector<int> order(static_cast<std::size_t>(count));
  std::iota(order.begin(), order.end(), 0);
  // By score, ties to the lower id, so greedy and top-k choices do not depend on the sort.
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  if (temperature == 0) return order.front();
  const int kept = top_k > 0 ? std::min(top_k, count) : count;
  const double top = logits[order.front()];
  std::vector<double> weights(static_cast<std::size_t>(kept));
  double total = 0;
  for (int i = 0; i < kept; ++i) {
    weights[static_cast<std::size_t>(i)] =
        std::exp((logits[order[static_cast<std::size_t>(i)]] - top) / temperature);
    total += weights[static_cast<std::size_t>(i)];
  }
  double target = u * total;
  for (int i = 0; i < kept; ++i) {
    target -= weights[static_cast<std::size_t>(i)];
    if (target < 0) return order[static_cast<std::size_t>(i)];
  }
  return order[static_cast<std::size_t>(kept - 1)];  // u * total rounded up to the total
}

namespace {

// What both kinds of prompt need: a gpt, a count, a temperature and a top-k that make sense.
Status check_settings(const ModelSpec& model, const SampleSettings& settings) {
  if (model.kind != "gpt") {
    return error(StatusCode::unsupported,
                 "sampling continues text, which needs a gpt; this job's model.kind is \"" +
                     model.kind + "\"");
  }
  if (settings.bytes < 1) {
    return error(StatusCode::invalid_argument,
                 "bytes must be at least 1, got " + std::to_string(settings.bytes));
  }
  if (!(settings.temperature >= 0) || !std::isfinite(settings.temperature)) {
    char value[32];
    std::snprintf(value, sizeof value, "%g", settings.temperature);
    return error(StatusCode::invalid_argument,
                 "temperature must be 0 (greedy) or more, got " + std::string(value));
  }
  const int vocab = model.gpt.vocab;
  if (settings.top_k < 0 || settings.top_k > vocab) {
    return error(StatusCode::invalid_argument, "top-k must lie in [0, " + std::to_string(vocab) +
                                                   "], got " + std::to_string(settings.top_k));
  }
  return Status::success();
}

Status check_prompt(const ModelSpec& model, const std::vector<std::int32_t>& prompt) {
  if (prompt.empty()) {
    return error(StatusCode::invalid_argument, "the prompt is empty: give at least one token");
  }
  const int vocab = model.gpt.vocab;
  for (std::size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= vocab) {
      return error(StatusCode::invalid_argument,
                   "prompt token " + std::to_string(prompt[i]) + " at index " + std::to_string(i) +
                       " is not in [0, model.vocab = " + std::to_string(vocab) + ")");
    }
  }
  return Status::success();
}

Status check_text_request(const ModelSpec& model, const SampleSettings& settings) {
  SPW_TRY(check_settings(model, settings));
  if (model.gpt.vocab != 256) {
    return error(StatusCode::unsupported,
                 "this model has model.vocab " + std::to_string(model.gpt.vocab) +
                     ", not bytes (256): sample it in token ids (spillway sample --prompt-ids) "
                     "and decode them with the tokenizer that made its data");
  }
  if (settings.prompt.empty()) {
    return error(StatusCode::invalid_argument, "the prompt is empty: give at least one byte");
  }
  return Status::success();
}

}  // namespace

Status check_sample_request(const ModelSpec& model, const SampleSettings& settings,
                            const std::vector<std::int32_t>* prompt) {
  if (prompt == nullptr) return check_text_request(model, settings);
  SPW_TRY(check_settings(model, settings));
  return check_prompt(model, *prompt);
}

NextTokenLogits trainer_logits(Trainer& trainer) {
  return [&trainer](const std::vector<std::int32_t>& window,
                    std::size_t last) -> Result<std::vector<float>> {
    std::vector<std::int32_t> targets(window.size(), 0);
    MicrobatchData mb;
    mb.samples = 1;
    mb.seq = static_cast<std::int64_t>(window.size());
    mb.tokens = window.data();
    mb.targets = targets.data();
    SPW_ASSIGN_OR_RETURN(const Tensor* scores, trainer.logits(mb));
    const auto vocab = static_cast<std::size_t>(scores->shape().cols());
    const float* row = scores->data() + last * vocab;
    return std::vector<float>(row, row + vocab);
  };
}

Result<std::vector<std::int32_t>> sample_tokens(const ModelSpec& model,
                                                const NextTokenLogits& logits,
                                                const std::vector<std::int32_t>& prompt,
                                                const SampleSettings& settings) {
  SPW_TRY(check_sample_request(model, settings, &prompt));
  const int vocab = model.gpt.vocab;
  const auto seq = static_cast<std::size_t>(model.gpt.seq);
  std::vector<std::int32_t> ids = prompt;
  std::vector<std::int32_t> window(seq, 0);
  std::mt19937_64 random(settings.seed);
  for (int n = 0; n < settings.bytes; ++n) {
    // The window ends at the newest token; causal attention keeps the zeros after it out.
    const std::size_t length = std::min(seq, ids.size());
    std::fill(window.begin(), window.end(), 0);
    std::copy(ids.end() - static_cast<std::ptrdiff_t>(length), ids.end(), window.begin());
    SPW_ASSIGN_OR_RETURN(const std::vector<float> next, logits(window, length - 1));
    if (next.size() != static_cast<std::size_t>(vocab)) {
      return error(StatusCode::internal, "the model gave " + std::to_string(next.size()) +
                                             " logits for a vocabulary of " +
                                             std::to_string(vocab));
    }
    // 53 random bits: a double in [0, 1) that does not depend on the standard library.
    const double u = static_cast<double>(random() >> 11) * 0x1.0p-53;
    ids.push_back(draw_token(next.data(), vocab, settings.temperature, settings.top_k, u));
  }
  return std::vector<std::int32_t>(ids.begin() + static_cast<std::ptrdiff_t>(prompt.size()),
                                   ids.end());
}

Result<std::string> sample_text(const ModelSpec& model, const NextTokenLogits& logits,
                                const SampleSettings& settings) {
  SPW_TRY(check_text_request(model, settings));
  std::vector<std::int32_t> prompt;
  for (char c : settings.prompt) prompt.push_back(static_cast<unsigned char>(c));
  SPW_ASSIGN_OR_RETURN(const std::vector<std::int32_t> ids,
                       sample_tokens(model, logits, prompt, settings));
  return std::string(ids.begin(), ids.end());
}

Result<std::vector<std::int32_t>> sample_tokens(Trainer& trainer,
                                                const std::vector<std::int32_t>& prompt,
                                                const SampleSettings& settings) {
  return sample_tokens(trainer.settings().model, trainer_logits(trainer), prompt, settings);
}

Result<std::string> sample_text(Trainer& trainer, const SampleSettings& settings) {
  return sample_text(trainer.settings().model, trainer_logits(trainer), settings);
}

}  // namespace spw
