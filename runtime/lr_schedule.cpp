#include "runtime/lr_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

namespace spw {

double scheduled_lr(double lr, const LrSchedule& s, std::int64_t step) {
  if (s.warmup_steps > 0 && step <= s.warmup_steps) {
    return lr * static_cast<double>(step) / static_cast<double>(s.warmup_steps);
  }
  if (s.decay == LrDecay::constant) return lr;
  const std::int64_t span = s.decay_steps - s.warmup_steps;
  const double p =
      span <= 0 ? 1.0
                : std::clamp(static_cast<double>(step - s.warmup_steps) /
                                 static_cast<double>(span),
                             0.0, 1.0);
  if (s.decay == LrDecay::cosine) {
    return s.min_lr + (lr - s.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * p));
  }
  return lr - (lr - s.min_lr) * p;
}

Status validate_schedule(double lr, const LrSchedule& s) {
  if (s.warmup_steps < 0) {
    return error(StatusCode::invalid_argument,
                 "learning-rate warmup_steps must be >= 0, got " +
                     std::to_string(s.warmup_steps));
  }
  if (s.decay_steps < 0) {
    return error(StatusCode::invalid_argument,
                 "learning-rate decay_steps must be >= 0, got " + std::to_string(s.decay_steps));
  }
  // Written so that NaN fails.
  if (!(s.min_lr >= 0.0) || !std::isfinite(s.min_lr) || s.min_lr > lr) {
    return error(StatusCode::invalid_argument,
                 "learning-rate min_lr must be finite and in [0, lr = " + std::to_string(lr) +
                     "], got " + std::to_string(s.min_lr));
  }
  return Status::success();
}

void end_open_decay_at(LrSchedule& schedule, std::int64_t total_steps) {
  if (schedule.decay_steps == 0) schedule.decay_steps = total_steps;
}

}  // namespace spw
