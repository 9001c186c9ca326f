// Interleaved 1F1B (Narayanan et al. 2021, Megatron-LM's
// forward_backward_pipelining_with_interleaving). Each rank holds v chunks, so a microbatch
// crosses the ranks v times and each hop is 1/v of a stage: the fill and drain shrink by
// about v at the price of v times more point-to-point messages.
//
// A rank walks m*v "virtual microbatches" k. They come in groups of P microbatches per
// chunk: k -> chunk (k mod P*v) / P, microbatch (k / (P*v)) * P + k mod P, backwards in
// reverse chunk order. Keeping whole groups of P is why m must be a multiple of P.
// Warm-up: 2 (P - rank - 1) + (v - 1) P forwards, then 1F1B over virtual microbatches.
#include <algorithm>

#include "partition/generators.hpp"
#include "partition/schedule_builder.hpp"

namespace spw::sched {

Result<Schedule> make_interleaved_1f1b(const ScheduleShape& shape) {
  SPW_TRY(check_shape("interleaved-1f1b", shape, 0));
  const int P = shape.ranks;
  const int m = shape.microbatches;
  const int v = shape.chunks;
  if (v < 2)
    return error(StatusCode::invalid_argument, "interleaved-1f1b: chunks (v) must be >= 2, got " +
                                                   std::to_string(v) +
                                                   "; use 1f1b for one chunk per rank");
  if (m % P != 0)
    return error(StatusCode::invalid_argument,
                 "interleaved-1f1b: microbatches (m) = " + std::to_string(m) +
                     " must be a multiple of ranks (P) = " + std::to_string(P));

  const int total = m * v;
  const auto microbatch = [&](int k) { return (k / (P * v)) * P + k % P; };
  const auto chunk = [&](int k, bool forward) {
    const int c = (k % (P * v)) / P;
    return forward ? c : v - 1 - c;
  };

  std::vector<std::vector<Instruction>> compute(static_cast<std::size_t>(P));
  for (int rank = 0; rank < P; ++rank) {
    auto& order = compute[static_cast<std::size_t>(rank)];
    const auto forward = [&](int k) {
      order.push_back(Instruction::forward(microbatch(k), chunk(k, true)));
    };
    const auto backward = [&](int k) {
      order.push_back(Instruction::backward_input(microbatch(k), chunk(k, false)));
      order.push_back(Instruction::backward_weight(microbatch(k), chunk(k, false)));
    };
    const int warmup = std::min(2 * (P - rank - 1) + (v - 1) * P, total);
    for (int k = 0; k < warmup; ++k) forward(k);
    for (int k = 0; k + warmup < total; ++k) {
      forward(warmup + k);
      backward(k);
    }
    for (int k = total - warmup; k < total; ++k) backward(k);
  }
  return lower_compute_order("interleaved-1f1b", shape, compute);
}

}  // namespace spw::sched
