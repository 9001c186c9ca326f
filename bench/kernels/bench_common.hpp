// Shared pieces of the kernel benchmarks: thread setup, operands allocated once and kept,
// the counters every benchmark reports, and the memcpy baseline.
//
// Names are "<kind>/<op>/<shape>/t<threads>" with kind "op" for a spillway op, "sgemm" for
// the raw BLIS product it is compared with, and "memcpy" for the copy of as many bytes;
// summarize.py pairs rows by everything after the kind.
#pragma once

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "kernels/status.hpp"
#include "kernels/tensor.hpp"

namespace spw::bench {

inline constexpr int kThreadCounts[] = {1, 2};

// OpenMP, BLIS and spw::compute_threads() all set to `threads` (and the team bound as the
// runtime binds it). Returns false, having marked the run skipped, if that fails.
bool use_threads(benchmark::State& state, int threads);

// A zero-filled tensor, or the benchmark is skipped with the allocation's error.
Tensor make_tensor(const Shape& shape);
// Uniform values in [lo, hi) from a fixed seed, so every run sees the same data.
void fill_uniform(Tensor& t, float lo, float hi, std::uint32_t seed);

// Operands of one benchmark, made on first use and kept for the whole run: built once per
// key, not per iteration nor per repetition. The op and its baseline can share a key.
template <class T>
T& operands(const std::string& key, const std::function<std::unique_ptr<T>()>& make);

// Marks the run failed with the op's message. Returns status.ok().
bool check(benchmark::State& state, const Status& status);

// Counters read by summarize.py: a rate ("flops" in flop/s or "bytes" in B/s, from wall
// time) and the per-iteration count it is made of ("flop_count" or "byte_count").
void set_flops(benchmark::State& state, double flops_per_iteration);
void set_bytes(benchmark::State& state, double bytes_per_iteration);

// How much of the machine other processes used while a benchmark ran: CPU time of the whole
// system (/proc/stat, including time the hypervisor stole) minus this process's own
// (getrusage), over wall time, in cores. Construct it just before the timed loop; report()
// sets the counters "foreign_cores" and "cpu_share" (this process's CPU time over wall time,
// in cores), which summarize.py uses to flag measurements another process disturbed.
class LoadProbe {
 public:
  LoadProbe();
  void report(benchmark::State& state) const;

 private:
  double wall_ = 0, own_ = 0, busy_ = 0;
};

// Copies n bytes with `threads` threads: one memcpy, or an OpenMP team each copying its
// contiguous share (whole cache lines) of the buffer.
void parallel_memcpy(void* dst, const void* src, std::size_t n, int threads);

// Registers "memcpy/<op>/<shape>/t<threads>": a copy of bytes_moved / 2 bytes, which reads
// and writes bytes_moved in all, counted as the op it stands beside is counted.
void register_memcpy(const std::string& op, const std::string& shape, int threads,
                     double bytes_moved);

// Registers benchmark `name` on `threads` threads: bind() makes the call (on operands made
// on first use, so when the benchmark runs, not when it is registered); the call runs once to
// warm up, then in the timed loop, and `count` sets the rate counter (set_bytes or set_flops).
// A call that fails marks the run failed with its message.
void register_call(const std::string& name, int threads,
                   std::function<std::function<Status()>()> bind,
                   std::function<void(benchmark::State&)> count);

// The name of a benchmark: kind/op/shape/t<threads>.
std::string bench_name(const std::string& kind, const std::string& op, const std::string& shape,
                       int threads);

// Every benchmark measures wall time (the ops run OpenMP teams) in milliseconds.
benchmark::internal::Benchmark* finish(benchmark::internal::Benchmark* b);

void register_gemm_benchmarks();
void register_elementwise_benchmarks();
void register_attention_benchmarks();

// ---- template definitions ----

namespace detail {
struct Holder {
  virtual ~Holder() = default;
};
template <class T>
struct HolderOf final : Holder {
  explicit HolderOf(std::unique_ptr<T> v) : value(std::move(v)) {}
  std::unique_ptr<T> value;
};
Holder* find_operands(const std::string& key);
Holder* store_operands(const std::string& key, std::unique_ptr<Holder> holder);
}  // namespace detail

template <class T>
T& operands(const std::string& key, const std::function<std::unique_ptr<T>()>& make) {
  detail::Holder* found = detail::find_operands(key);
  if (found == nullptr) {
    found = detail::store_operands(key, std::make_unique<detail::HolderOf<T>>(make()));
  }
  return *static_cast<detail::HolderOf<T>*>(found)->value;
}

}  // namespace spw::bench
