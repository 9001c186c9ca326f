// How the learning rate moves over a run, as GPT training scripts usually move it: a linear
// warm-up over the first steps (large early updates of AdamW's still-empty moments are what
// it guards against), then constant, or a cosine or linear decay to a floor.
//
// A pure function of the step: every rank of a pipeline, every replica and a resumed run
// compute the same rate from the step count alone, so the schedule needs no communication
// and no state of its own in a checkpoint.
#pragma once

#include <cstdint>

#include "kernels/status.hpp"

namespace spw {

enum class LrDecay { constant, cosine, linear };

struct LrSchedule {
  LrDecay decay = LrDecay::constant;
  std::int64_t warmup_steps = 0;  // 0: no warm-up
  // The step at which the decay reaches min_lr; 0 until the trainer or the executor sets it
  // to the run's last step (the job's train.decay_steps when it gives one).
  std::int64_t decay_steps = 0;
  double min_lr = 0;
  bool operator==(const LrSchedule&) const = default;
};

// The learning rate of 1-based step `step` for base rate `lr`:
//   step <= warmup_steps: lr * step / warmup_steps (lr / warmup_steps first, lr at the last);
//   after it, constant: lr;
//   cosine: min_lr + (lr - min_lr) (1 + cos(pi p)) / 2, linear: lr - (lr - min_lr) p, with
//   p = (step - warmup_steps) / (decay_steps - warmup_steps) held to [0, 1], so min_lr at
//   decay_steps and after (and at once after the warm-up if decay_steps <= warmup_steps).
double scheduled_lr(double lr, const LrSchedule& schedule, std::int64_t step);

// invalid_argument naming the field: warmup_steps or decay_steps negative, min_lr negative,
// not finite or above lr.
Status validate_schedule(double lr, const LrSchedule& schedule);

// A decay the job leaves open (decay_steps 0) ends at the run's last step.
void end_open_decay_at(LrSchedule& schedule, std::int64_t total_steps);

}  // namespace spw
