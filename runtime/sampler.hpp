// Text from a trained byte-level GPT: continues a prompt one byte at a time, each drawn from
// the model's next-byte distribution at the end of the window it sees (the last model.seq
// bytes). A look at what a checkpoint has learned, not a serving path: every byte costs a
// forward pass over a whole window, on one rank.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/status.hpp"
#include "runtime/trainer.hpp"

namespace spw {

struct SampleSettings {
  std::string prompt = "\n";  // at least one byte
  int bytes = 200;            // how many to add
  // Divides the logits before the softmax: below 1 sharpens, above 1 flattens; 0 takes the
  // most likely byte every time (greedy, no randomness).
  double temperature = 1.0;
  int top_k = 0;           // draw among the k most likely bytes; 0: among all 256
  std::uint64_t seed = 1;  // the same seed, checkpoint and prompt give the same text
};

// The continuation alone (settings.bytes bytes). invalid_argument naming the setting when
// the prompt is empty, bytes < 1, the temperature is negative or not finite, or top_k is
// outside [0, 256]; unsupported when the trainer's model is not a byte-level gpt (vocab 256).
Result<std::string> sample_text(Trainer& trainer, const SampleSettings& settings);

// One draw from the softmax of logits[0, count) / temperature, among the top_k largest
// (0: all), with u uniform in [0, 1); temperature 0: the first largest. Exposed for tests.
int draw_token(const float* logits, int count, double temperature, int top_k, double u);

}  // namespace spw
