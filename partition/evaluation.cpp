// The evaluation schedule: a training schedule's forwards alone, for measuring the loss on
// held-out data between steps. It keeps each rank's forwards and their activation transfers in
// the training order (which the generator already made deadlock-free and overlapping), drops
// every stash as soon as the forward's output is handed on, and leaves out everything a
// backward, a reduce or a step needs. PipeFB's backward ranks get empty lists.
#include "partition/generators.hpp"

namespace spw::sched {

Result<Schedule> make_evaluation(const Schedule& training) {
  if (training.forward_only) {
    return error(StatusCode::invalid_argument,
                 "schedule '" + training.name + "' is already an evaluation");
  }
  Schedule evaluation;
  evaluation.name = training.name + " (evaluation)";
  evaluation.ranks = training.ranks;
  evaluation.microbatches = training.microbatches;
  evaluation.chunks = training.chunks;
  evaluation.placement = training.placement;
  evaluation.forward_only = true;
  const StageIndex index(training);
  for (int rank = 0; rank < training.ranks; ++rank) {
    std::vector<Instruction> list;
    for (const Instruction& in : training.lists[static_cast<std::size_t>(rank)]) {
      if (in.op == Op::recv_act) list.push_back(in);
      if (in.op == Op::send_act) {
        list.push_back(in);
        list.push_back(Instruction::drop_stash(in.mb, in.chunk));
      }
      if (in.op != Op::forward) continue;
      list.push_back(in);
      // An output that stays on this rank (the next stage's input is copied at once) or that
      // goes nowhere (the loss) frees the stash right away; one that travels, after its send.
      const int stage = index.stage_of(rank, in.chunk, Direction::forward);
      if (stage < 0) {
        return error(StatusCode::invalid_argument,
                     "schedule '" + training.name + "': rank " + std::to_string(rank) + " " +
                         to_string(in) + " runs no forward of its chunk");
      }
      const bool output_travels =
          stage + 1 < training.stages() && training.forward_rank_of(stage + 1) != rank;
      if (!output_travels) list.push_back(Instruction::drop_stash(in.mb, in.chunk));
    }
    evaluation.lists.push_back(std::move(list));
  }
  return evaluation;
}

}  // namespace spw::sched
