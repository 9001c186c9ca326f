#include "runtime/sample_window.hpp"

#include <cstdio>

namespace spw {

namespace {
// -Wpedantic objects to __int128 by name; __extension__ marks the use as deliberate.
__extension__ using Wide = unsigned __int128;
}  // namespace

std::int64_t sample_window_start(std::int64_t size, std::int64_t step, std::int64_t sample,
                                 std::int64_t global_batch, std::int64_t seq) {
  if (seq < 1 || size < 2 || size - 2 < seq) return 0;
  const auto modulus = static_cast<std::uint64_t>(size - seq - 1);
  // (a * b) mod m == ((a mod m) * (b mod m)) mod m; every residue is below 2^63, so each
  // product fits in 128 bits and the result equals the formula over unbounded integers.
  const auto residue = [modulus](std::int64_t v) {
    return static_cast<std::uint64_t>(v) % modulus;
  };
  const Wide index = (Wide{residue(step)} * residue(global_batch) + residue(sample)) % modulus;
  const Wide stride = (Wide{7919} * static_cast<std::uint64_t>(seq)) % modulus;
  return static_cast<std::int64_t>((index * stride) % modulus);
}

Result<StreamPart> holdout_part(std::int64_t size, double holdout, std::int64_t seq,
                                bool held_out, const std::string& stream,
                                const std::string& unit) {
  if (!(holdout > 0 && holdout < 1)) {
    return error(StatusCode::invalid_argument,
                 "data.holdout must lie strictly between 0 and 1 to split " + stream);
  }
  const auto held = static_cast<std::int64_t>(static_cast<double>(size) * holdout);
  const std::int64_t cut = size - held;
  const StreamPart part{held_out ? cut : 0, held_out ? held : cut};
  if (part.count < 2 || part.count - 2 < seq) {
    char fraction[32];
    std::snprintf(fraction, sizeof fraction, "%g", holdout);
    std::string message = "data.holdout = ";
    message += fraction;
    message += " leaves " + std::to_string(part.count) + " of the " + std::to_string(size);
    message += " " + unit + " of " + stream + " for ";
    message += held_out ? "evaluation" : "training";
    message += ", fewer than model.seq + 2 = " + std::to_string(seq + 2) + ": ";
    message += held_out ? "raise data.holdout" : "lower data.holdout";
    return error(StatusCode::invalid_argument, message);
  }
  return part;
}

}  // namespace spw
