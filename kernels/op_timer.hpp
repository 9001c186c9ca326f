// Wall time spent in each kernel op, per process: where a step's time goes, as the memory
// ledger says where its bytes go. Every public op in kernels/ops times itself with an
// OpTimer, and so does the optimizer's step. An op called from inside another op counts
// towards the outer one only, so on one thread the seconds of all ops add up to at most
// that thread's wall time. Timing costs two clock reads and two atomic additions a call (67
// ns on the Zen 3 VM, 2026-11-27, against the microseconds or more an op takes), so it is
// always on. Reports take the difference of two op_times() readings around the steps they
// cover.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace spw {

enum class KernelOp : int {
  linear_forward,
  linear_forward_residual,
  linear_backward_input,
  linear_backward_weight,
  bias_forward,
  bias_backward_weight,
  attention_forward,
  attention_backward,
  layernorm_forward,
  layernorm_backward_input,
  layernorm_backward_weight,
  gelu_forward,
  gelu_backward,
  relu_forward,
  relu_backward,
  embedding_forward,
  embedding_backward_weight,
  cross_entropy_forward,
  cross_entropy_backward,
  cross_entropy_loss_and_gradient,
  count_correct,
  residual_forward,
  accumulate,
  optimizer_step,  // runtime/optimizer.cpp's update of all parameters, timed as an op too
};
inline constexpr std::size_t kOpCount = static_cast<std::size_t>(KernelOp::optimizer_step) + 1;

// The op's C++ function name, e.g. "layernorm_forward".
std::string_view op_name(KernelOp op);

struct OpTimes {
  std::array<double, kOpCount> seconds{};
  std::array<std::int64_t, kOpCount> calls{};

  double seconds_of(KernelOp op) const { return seconds[static_cast<std::size_t>(op)]; }
  std::int64_t calls_of(KernelOp op) const { return calls[static_cast<std::size_t>(op)]; }
  double total_seconds() const;
  // What happened between an earlier reading and this one.
  OpTimes since(const OpTimes& earlier) const;
  OpTimes& operator+=(const OpTimes& more);
};

// Seconds and calls of every op since the process started, from all threads.
OpTimes op_times();

// Times one op call from construction to destruction; the outermost timer on a thread counts.
class OpTimer {
 public:
  explicit OpTimer(KernelOp op);
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  KernelOp op_;
  bool outermost_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace spw
