// Text from a trained GPT: continues a prompt one token at a time, each drawn from the model's
// next-token distribution at the end of the window it sees (the last model.seq tokens); bytes
// for a byte-level model, token ids for one of a token file's vocabulary. A look at what a
// checkpoint has learned, not a serving path: every token costs a forward pass over a whole
// window, on one rank (a Trainer) or through a pipeline (PipelineExecutor::next_token_logits).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/status.hpp"
#include "runtime/trainer.hpp"

namespace spw {

struct SampleSettings {
  std::string prompt = "\n";  // at least one byte
  int bytes = 200;            // how many to add (tokens, for sample_tokens)
  // Divides the logits before the softmax: below 1 sharpens, above 1 flattens; 0 takes the
  // most likely byte every time (greedy, no randomness).
  double temperature = 1.0;
  int top_k = 0;           // draw among the k most likely bytes; 0: among all 256
  std::uint64_t seed = 1;  // the same seed, checkpoint and prompt give the same text
};

// What sampling asks of a model: the next-token logits (model.vocab floats) after position
// `last` of `window`, model.seq token ids (those after `last` are zeros). Every process that
// samples must get the same values, since each draws the same tokens from them.
using NextTokenLogits = std::function<Result<std::vector<float>>(
    const std::vector<std::int32_t>& window, std::size_t last)>;

// A trainer's logits (Trainer::logits on one window).
NextTokenLogits trainer_logits(Trainer& trainer);

// The checks sample_tokens (with `prompt`) or sample_text (prompt null: settings.prompt)
// make before the first forward, for callers that must know before a collective pass: the
// same errors, in the same order.
Status check_sample_request(const ModelSpec& model, const SampleSettings& settings,
                            const std::vector<std::int32_t>* prompt);

// settings.bytes token ids continuing `prompt` (settings.prompt is not read), each drawn from
// `logits` of the window that ends at the newest token. invalid_argument naming the setting
// when bytes < 1, the temperature is negative or not finite, or top_k is outside
// [0, model.vocab], and for an empty prompt or an id outside [0, model.vocab), naming it and
// its index; unsupported when the model is not a gpt; errors of `logits` as they come.
Result<std::vector<std::int32_t>> sample_tokens(const ModelSpec& model,
                                                const NextTokenLogits& logits,
                                                const std::vector<std::int32_t>& prompt,
                                                const SampleSettings& settings);

// The continuation alone (settings.bytes bytes) of settings.prompt, for a byte-level gpt.
// Errors as sample_tokens, and invalid_argument when the prompt is empty, unsupported when
// the model's vocabulary is not bytes (vocab 256: sample it in ids).
Result<std::string> sample_text(const ModelSpec& model, const NextTokenLogits& logits,
                                const SampleSettings& settings);

// The same from a trainer's model.
Result<std::vector<std::int32_t>> sample_tokens(Trainer& trainer,
                                                const std::vector<std::int32_t>& prompt,
                                                const SampleSettings& settings);
Result<std::string> sample_text(Trainer& trainer, const SampleSettings& settings);

// One draw from the softmax of logits[0, count) / temperature, among the top_k largest
// (0: all), with u uniform in [0, 1); temperature 0: the first largest. Exposed for tests.
int draw_token(const float* logits, int count, double temperature, int top_k, double u);

}  // namespace spw
