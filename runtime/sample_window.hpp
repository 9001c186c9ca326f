// Where each training sample's window starts in a stream of tokens, and how data.holdout
// splits the stream, shared by the text corpus and token files so that the same tokens give
// the same batches and the same split whichever holds them.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/status.hpp"

namespace spw {

// Start of sample `sample` of step `step` in a stream of `size` tokens:
//   o = ((step * global_batch + sample) * 7919 * seq) mod (size - seq - 1).
// 7919 is prime, so consecutive samples stride across the stream instead of overlapping.
// Evaluated exactly for all non-negative arguments (residues multiplied in 128 bits), so very
// long runs never wrap around to a different window than the formula says. 0 when the stream
// holds no window (size < seq + 2) or seq < 1.
std::int64_t sample_window_start(std::int64_t size, std::int64_t step, std::int64_t sample,
                                 std::int64_t global_batch, std::int64_t seq);

// The tokens [first, first + count) of a stream of `size` that data.holdout gives to
// evaluation (held_out) or to training: the held-out part is the last floor(size * holdout)
// tokens, the training part those before, so no window of one overlaps the other.
// invalid_argument naming data.holdout unless 0 < holdout < 1 and the part holds at least
// seq + 2 tokens; messages call the stream `stream` ("text corpus PATH") and its tokens
// `unit` ("bytes").
struct StreamPart {
  std::int64_t first = 0;
  std::int64_t count = 0;
};
Result<StreamPart> holdout_part(std::int64_t size, double holdout, std::int64_t seq,
                                bool held_out, const std::string& stream,
                                const std::string& unit);

}  // namespace spw
