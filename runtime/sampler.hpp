// Text from a trained GPT: continues a prompt one token at a time, each drawn from the model's
// next-token distribution at the end of the window it sees (the last model.seq tokens); bytes
// for a byte-level model, token ids for one of a token file's vocabulary. A look at what a
// checkpoint has learned, not a serving path: every byte costs a forward pass over a whole window,
// on one rank.
#pragma once

#include <cstdint>
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

// The continuation alone (settings.bytes bytes) of settings.prompt. invalid_argument naming
// the setting when the prompt is empty, bytes < 1, the temperature is negative or not finite,
// or top_k is outside [0, 256]; unsupported when the trainer's model is not a gpt, or not a
// byte-level one (vocab 256: sample_tokens takes any).
Result<std::string> sample_text(Trainer& trainer, const SampleSettings& settings);

// The same for any gpt, in token ids: settings.bytes ids continuing `prompt` (settings.prompt
// is not read). invalid_argument as sample_text, and for an empty
// prompt or an id outside [0, model.vocab), naming it and its index.
Result<std::vector<std::int32_t>> sample_tokens(Trainer& trainer,
                                                const std::vector<std::int32_t>& prompt,
                                                const SampleSettings& settings);

// One draw from the softmax of logits[0, count) / temperature, among the top_k largest
// (0: all), with u uniform in [0, 1); temperature 0: the first largest. Exposed for tests.
int draw_token(const float* logits, int count, double temperature, int top_k, double u);

}  // namespace spw
