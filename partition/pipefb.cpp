// PipeFB: every stage's forwards and backwards on two different ranks. Forward rank F_s
// streams microbatches through the stage and ships each stash (everything the backward
// needs) to backward rank B_s, which runs B and W in microbatch order, steps the optimizer
// after the flush and sends the updated parameters back to F_s. The forward ranks hold
// no gradients or optimizer state and never wait for a backward inside the iteration, so
// with F = B + W both kinds of ranks stay busy once the pipeline fills; the price is a
// stash transfer per microbatch and a parameter transfer per iteration.
//
// Placement (v = 1): stage s runs forwards on rank s and backwards on rank P + s, both as
// local chunk 0. Lists, with [..] only where the neighbour exists:
//   F_s: per mb: [RA<F_{s-1}] F [SA>F_{s+1}] SS>B_s;  then RP<B_s.
//   B_s: per mb: RS<F_s [RG<B_{s+1}] B W [SG>B_{s-1}]; [RD] OPT SP>F_s.
// The last stage's B needs no RecvGrad: its loss gradient comes from the stash. RecvParams
// closes the forward rank's iteration, so it starts the next one with the new weights.
#include "partition/generators.hpp"
#include "partition/schedule_builder.hpp"

namespace spw::sched {

Result<Schedule> make_pipefb(const ScheduleShape& shape) {
  SPW_TRY(check_shape("pipefb", shape, 1));
  const int P = shape.ranks;
  const int m = shape.microbatches;
  Schedule schedule;
  schedule.name = "pipefb";
  schedule.ranks = 2 * P;
  schedule.microbatches = m;
  schedule.chunks = 1;
  schedule.data_parallel = shape.data_parallel;
  schedule.lists.resize(static_cast<std::size_t>(2 * P));
  for (int s = 0; s < P; ++s) schedule.placement.push_back({s, 0, P + s, 0});

  using I = Instruction;
  for (int s = 0; s < P; ++s) {
    const int F = s, B = P + s;
    auto& forward = schedule.lists[static_cast<std::size_t>(F)];
    for (int mb = 0; mb < m; ++mb) {
      if (s > 0) forward.push_back(I::recv_act(mb, 0, F - 1));
      forward.push_back(I::forward(mb, 0));
      if (s + 1 < P) forward.push_back(I::send_act(mb, 0, F + 1));
      forward.push_back(I::send_stash(mb, 0, B));
    }
    forward.push_back(I::recv_params(0, B));

    auto& backward = schedule.lists[static_cast<std::size_t>(B)];
    for (int mb = 0; mb < m; ++mb) {
      backward.push_back(I::recv_stash(mb, 0, F));
      if (s + 1 < P) backward.push_back(I::recv_grad(mb, 0, B + 1));
      backward.push_back(I::backward_input(mb, 0));
      backward.push_back(I::backward_weight(mb, 0));
      if (s > 0) backward.push_back(I::send_grad(mb, 0, B - 1));
    }
    if (shape.data_parallel) backward.push_back(I::reduce_grads(0));
    backward.push_back(I::optimizer_step());
    backward.push_back(I::send_params(0, F));
  }
  return schedule;
}

}  // namespace spw::sched
