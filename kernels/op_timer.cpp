#include "kernels/op_timer.hpp"

#include <algorithm>

namespace spw {

namespace {

// In KernelOp's order.
constexpr std::array<std::string_view, kOpCount> kNames = {
    "linear_forward",
    "linear_forward_residual",
    "linear_backward_input",
    "linear_backward_weight",
    "bias_forward",
    "bias_backward_weight",
    "attention_forward",
    "attention_backward",
    "layernorm_forward",
    "layernorm_backward_input",
    "layernorm_backward_weight",
    "gelu_forward",
    "gelu_backward",
    "relu_forward",
    "relu_backward",
    "embedding_forward",
    "embedding_backward_weight",
    "cross_entropy_forward",
    "cross_entropy_backward",
    "cross_entropy_loss_and_gradient",
    "count_correct",
    "residual_forward",
    "accumulate",
    "optimizer_step",
};
// A name left out would be empty, not a compile error.
static_assert(std::ranges::none_of(kNames, [](std::string_view name) { return name.empty(); }),
              "every KernelOp needs its name in kNames");

// Nanoseconds rather than seconds: integer atomics add without a compare-and-swap loop.
std::array<std::atomic<std::int64_t>, kOpCount> g_nanoseconds{};
std::array<std::atomic<std::int64_t>, kOpCount> g_calls{};
thread_local int t_depth = 0;

}  // namespace

std::string_view op_name(KernelOp op) { return kNames[static_cast<std::size_t>(op)]; }

double OpTimes::total_seconds() const {
  double total = 0;
  for (double s : seconds) total += s;
  return total;
}

OpTimes OpTimes::since(const OpTimes& earlier) const {
  OpTimes d;
  for (std::size_t i = 0; i < kOpCount; ++i) {
    d.seconds[i] = seconds[i] - earlier.seconds[i];
    d.calls[i] = calls[i] - earlier.calls[i];
  }
  return d;
}

OpTimes& OpTimes::operator+=(const OpTimes& more) {
  for (std::size_t i = 0; i < kOpCount; ++i) {
    seconds[i] += more.seconds[i];
    calls[i] += more.calls[i];
  }
  return *this;
}

OpTimes op_times() {
  OpTimes t;
  for (std::size_t i = 0; i < kOpCount; ++i) {
    t.seconds[i] = 1e-9 * static_cast<double>(g_nanoseconds[i].load(std::memory_order_relaxed));
    t.calls[i] = g_calls[i].load(std::memory_order_relaxed);
  }
  return t;
}

OpTimer::OpTimer(KernelOp op) : op_(op), outermost_(t_depth++ == 0) {
  if (outermost_) start_ = std::chrono::steady_clock::now();
}

OpTimer::~OpTimer() {
  --t_depth;
  if (!outermost_) return;
  const auto elapsed = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now() - start_);
  const auto i = static_cast<std::size_t>(op_);
  g_nanoseconds[i].fetch_add(elapsed.count(), std::memory_order_relaxed);
  g_calls[i].fetch_add(1, std::memory_order_relaxed);
}

}  // namespace spw
