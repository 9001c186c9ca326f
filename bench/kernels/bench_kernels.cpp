// bench_kernels: spillway's ops beside the machine's own ceilings at the same shapes and
// thread counts: Linear against raw bli_sgemm, element-wise ops against memcpy of as many
// bytes, attention in GFLOP/s. bench/kernels/run.sh runs it and summarize.py makes the table.
#include <blis.h>
#include <omp.h>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <string>

#include "bench/kernels/bench_common.hpp"
#include "kernels/memory_category.hpp"
#include "kernels/threading.hpp"

namespace spw::bench {

// The team is bound once, for the largest thread count, before any benchmark runs (see
// main); switching counts afterwards changes only the counts. Binding again would go wrong:
// setup_threads reads the cores it may use from the process binding, which after a binding
// is the main thread's one core, so it would leave every later-created thread on that core.
bool use_threads(benchmark::State& state, int threads) {
  static int current = 0;
  if (current == threads) return true;
  ThreadRequest request;
  request.threads = threads;
  request.bind = false;
  Result<ThreadSetup> setup = setup_threads(request);
  if (!setup.ok()) {
    state.SkipWithError(("setup_threads: " + setup.status().message()).c_str());
    return false;
  }
  current = threads;
  return true;
}

Tensor make_tensor(const Shape& shape) {
  Result<Tensor> t = Tensor::zeros(shape, MemoryCategory::workspace);
  if (!t.ok()) {
    std::fprintf(stderr, "bench_kernels: allocating %s: %s\n", shape.to_string().c_str(),
                 t.status().message().c_str());
    std::exit(1);
  }
  return std::move(t).value();
}

void fill_uniform(Tensor& t, float lo, float hi, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  float* p = t.data();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
}

bool check(benchmark::State& state, const Status& status) {
  if (status.ok()) return true;
  state.SkipWithError(status.message().c_str());
  return false;
}

void set_flops(benchmark::State& state, double flops_per_iteration) {
  state.counters["flops"] = benchmark::Counter(
      flops_per_iteration, benchmark::Counter::kIsIterationInvariantRate,
      benchmark::Counter::kIs1000);
  state.counters["flop_count"] = benchmark::Counter(flops_per_iteration);
}

void set_bytes(benchmark::State& state, double bytes_per_iteration) {
  state.counters["bytes"] = benchmark::Counter(
      bytes_per_iteration, benchmark::Counter::kIsIterationInvariantRate,
      benchmark::Counter::kIs1000);
  state.counters["byte_count"] = benchmark::Counter(bytes_per_iteration);
}

namespace {

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double own_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto sec = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec);
  };
  return sec(usage.ru_utime) + sec(usage.ru_stime);
}

// Busy CPU seconds of the whole system, summed over CPUs: everything but idle and iowait,
// with steal (time the hypervisor gave to other guests) counted as busy.
double system_busy_seconds() {
  std::ifstream stat("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  stat >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
  static const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  return (user + nice + system + irq + softirq + steal) / tick;
}

}  // namespace

LoadProbe::LoadProbe()
    : wall_(wall_seconds()), own_(own_cpu_seconds()), busy_(system_busy_seconds()) {}

void LoadProbe::report(benchmark::State& state) const {
  const double wall = wall_seconds() - wall_;
  const double own = own_cpu_seconds() - own_;
  const double busy = system_busy_seconds() - busy_;
  if (wall <= 0) return;
  state.counters["foreign_cores"] = benchmark::Counter(std::max(0.0, busy - own) / wall);
  state.counters["cpu_share"] = benchmark::Counter(own / wall);
}

void parallel_memcpy(void* dst, const void* src, std::size_t n, int threads) {
  if (threads <= 1) {
    std::memcpy(dst, src, n);
    return;
  }
  constexpr std::size_t kLine = 64;
  const std::size_t lines = (n + kLine - 1) / kLine;
#pragma omp parallel num_threads(threads)
  {
    const auto t = static_cast<std::size_t>(omp_get_thread_num());
    const auto nt = static_cast<std::size_t>(omp_get_num_threads());
    const std::size_t begin = std::min(n, lines * t / nt * kLine);
    const std::size_t end = std::min(n, lines * (t + 1) / nt * kLine);
    if (end > begin) {
      std::memcpy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin,
                  end - begin);
    }
  }
}

void register_call(const std::string& name, int threads,
                   std::function<std::function<Status()>()> bind,
                   std::function<void(benchmark::State&)> count) {
  finish(benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& state) {
    if (!use_threads(state, threads)) return;
    const std::function<Status()> call = bind();
    if (!check(state, call())) return;  // warm-up
    const LoadProbe probe;
    for (auto _ : state) {
      const Status status = call();
      if (!check(state, status)) return;
      benchmark::ClobberMemory();
    }
    probe.report(state);
    count(state);
  }));
}

std::string bench_name(const std::string& kind, const std::string& op, const std::string& shape,
                       int threads) {
  return kind + "/" + op + "/" + shape + "/t" + std::to_string(threads);
}

benchmark::internal::Benchmark* finish(benchmark::internal::Benchmark* b) {
  return b->UseRealTime()->Unit(benchmark::kMillisecond);
}

namespace {
struct CopyBuffers {
  Tensor src, dst;
};
}  // namespace

void register_memcpy(const std::string& op, const std::string& shape, int threads,
                     double bytes_moved) {
  // Whole floats, at least as many bytes as half of what the op moves.
  const auto floats = static_cast<std::int64_t>((bytes_moved / 2 + 3) / 4);
  const double moved = 2.0 * static_cast<double>(floats) * 4.0;
  const std::string key = "memcpy/" + std::to_string(floats);
  finish(benchmark::RegisterBenchmark(
      bench_name("memcpy", op, shape, threads).c_str(),
      [=](benchmark::State& state) {
        if (!use_threads(state, threads)) return;
        CopyBuffers& b = operands<CopyBuffers>(key, [&] {
          auto c = std::make_unique<CopyBuffers>();
          c->src = make_tensor(Shape{floats});
          c->dst = make_tensor(Shape{floats});
          fill_uniform(c->src, -1.0f, 1.0f, 7);
          return c;
        });
        const std::size_t n = b.src.bytes();
        parallel_memcpy(b.dst.data(), b.src.data(), n, threads);  // warm-up
        const LoadProbe probe;
        for (auto _ : state) {
          parallel_memcpy(b.dst.data(), b.src.data(), n, threads);
          benchmark::ClobberMemory();
        }
        probe.report(state);
        set_bytes(state, moved);
      }));
}

namespace detail {
namespace {
std::map<std::string, std::unique_ptr<Holder>>& registry() {
  static std::map<std::string, std::unique_ptr<Holder>> map;
  return map;
}
}  // namespace

Holder* find_operands(const std::string& key) {
  auto it = registry().find(key);
  return it == registry().end() ? nullptr : it->second.get();
}

Holder* store_operands(const std::string& key, std::unique_ptr<Holder> holder) {
  Holder* raw = holder.get();
  registry()[key] = std::move(holder);
  return raw;
}
}  // namespace detail

}  // namespace spw::bench

int main(int argc, char** argv) {
  // Bind the largest team once, as a rank does at start-up: thread i on core i.
  spw::ThreadRequest request;
  request.threads = *std::max_element(std::begin(spw::bench::kThreadCounts),
                                      std::end(spw::bench::kThreadCounts));
  spw::Result<spw::ThreadSetup> setup = spw::setup_threads(request);
  if (!setup.ok()) {
    std::fprintf(stderr, "bench_kernels: setup_threads: %s\n", setup.status().message().c_str());
    return 1;
  }
  // Appended piece by piece: operator+ on these strings trips GCC 12's -Wrestrict.
  std::string binding = setup->binding;
  binding.append(", PU of each thread:");
  for (int pu : setup->pu_of_thread) binding.append(" ").append(std::to_string(pu));
  benchmark::AddCustomContext("thread_binding", binding);

  spw::bench::register_gemm_benchmarks();
  spw::bench::register_elementwise_benchmarks();
  spw::bench::register_attention_benchmarks();

  benchmark::AddCustomContext("blis_version", bli_info_get_version_str());
  // setup_threads chose them, so raw bli_sgemm runs the kernels Linear does.
  benchmark::AddCustomContext("blis_kernels",
                              setup->blas.kernels + " (chosen by " + setup->blas.chosen_by + ")");
  benchmark::AddCustomContext("openmp_max_threads", std::to_string(omp_get_max_threads()));
  benchmark::AddCustomContext(
      "linear_flops", "2*m*n*k per product; bias fill and bias-gradient passes not counted");
  benchmark::AddCustomContext(
      "attention_flops",
      "causal, counted on the T(T+1)/2 unmasked (query, key) pairs: forward 4*B*d*T(T+1)/2 "
      "(Q.K^T and P.V), backward 8*B*d*T(T+1)/2 (dO.V^T, P^T.dO, dS.K, dS^T.Q; the "
      "recomputed Q.K^T, softmax and exp not counted); x 2T/(T+1) for the dense convention");
  benchmark::AddCustomContext(
      "bytes", "compulsory traffic: each distinct element read once plus each element written "
               "once (read-modify-write counts twice); memcpy of n bytes moves 2n");

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
