// bench_planner [OUT.json]: the planner's predicted iteration time against the classic
// ways of splitting a model into stages, and how long planning takes at scale.
//
// On each profile the planner picks P, R, v, m, the schedule, the mapping and the split; the
// baselines then re-split the same shape (same P, R, v, m, schedule and mapping) so only the
// split differs, and the same simulator predicts every one:
//   uniform     DeepSpeed partition_method="uniform": equal numbers of blocks per stage;
//   parameters  DeepSpeed partition_method="parameters": balanced parameter counts;
//   time        torchgpipe balance_by_time: the contiguous split minimising the slowest
//               stage's forward + backward time (solved exactly here).
// Then planning time for 1,000 blocks on 1,024 ranks (64 nodes x 16 ranks).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "partition/planner.hpp"
#include "partition/planner_split.hpp"

namespace {

using namespace spw::sched;
using nlohmann::json;

constexpr std::int64_t MiB = std::int64_t{1} << 20;
constexpr std::int64_t GiB = std::int64_t{1} << 30;

BlockProfile layer(const std::string& name, double forward_s, std::int64_t params) {
  return {name, forward_s, forward_s, forward_s, 48 * MiB, 8 * MiB, params, params, 2 * params};
}

// gpt-like: 48 equal layers of 150M parameters (fp32), 1 sample per measured microbatch.
ModelProfile uniform_transformer() {
  ModelProfile p;
  p.model = "uniform-transformer-48";
  for (int i = 0; i < 48; ++i)
    p.blocks.push_back(layer("layer" + std::to_string(i), 0.02, 600 * MiB));
  p.optimizer_step_s = 0.5;
  return p;
}

// A large vocabulary: the embedding holds many parameters but little compute, the head
// (projection to the vocabulary + loss) both, with large logits stashed.
ModelProfile heavy_ends() {
  ModelProfile p;
  p.model = "embedding-32-layers-head";
  p.blocks.push_back(
      {"embedding", 0.002, 0.002, 0.004, 8 * MiB, 8 * MiB, 2 * GiB, 2 * GiB, 4 * GiB});
  for (int i = 0; i < 32; ++i)
    p.blocks.push_back(layer("layer" + std::to_string(i), 0.02, 400 * MiB));
  p.blocks.push_back({"head", 0.08, 0.08, 0.08, 512 * MiB, 256 * MiB, 2 * GiB, 2 * GiB, 4 * GiB});
  p.optimizer_step_s = 0.4;
  return p;
}

ModelProfile random_profile(int blocks, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> time(0.005, 0.05);
  std::uniform_int_distribution<std::int64_t> mib(4, 1024);
  ModelProfile p;
  p.model = "random-" + std::to_string(blocks);
  for (int i = 0; i < blocks; ++i) {
    const std::int64_t params = mib(rng) * MiB;
    p.blocks.push_back({"block" + std::to_string(i), time(rng), time(rng), time(rng),
                        mib(rng) * MiB / 8, mib(rng) * MiB / 64, params, params, 2 * params});
  }
  p.optimizer_step_s = 0.3;
  return p;
}

// 1,000 blocks of a few tens of millions of parameters each, sizes and times varying 4x.
ModelProfile thousand_blocks() {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> time(0.002, 0.008);
  std::uniform_int_distribution<std::int64_t> mib(16, 64);
  ModelProfile p;
  p.model = "random-1000";
  for (int i = 0; i < 1000; ++i) {
    const std::int64_t params = mib(rng) * MiB;
    p.blocks.push_back({"block" + std::to_string(i), time(rng), time(rng), time(rng),
                        mib(rng) * MiB / 4, mib(rng) * MiB / 16, params, params, 2 * params});
  }
  p.optimizer_step_s = 2;
  return p;
}

std::vector<StageRange> uniform_split(int blocks, int stages) {
  // DeepSpeed's partition_uniform: the first blocks % stages parts get one more block.
  std::vector<StageRange> out;
  const int base = blocks / stages, extra = blocks % stages;
  for (int s = 0, first = 0; s < stages; ++s) {
    const int size = base + (s < extra ? 1 : 0);
    out.push_back({first, first + size - 1});
    first += size;
  }
  return out;
}

template <class Weight>
std::vector<StageRange> balanced_split(int blocks, int stages, const Weight& weight) {
  std::vector<double> prefix{0};
  for (int i = 0; i < blocks; ++i) prefix.push_back(prefix.back() + weight(i));
  const auto cost = [&](int, int a, int b) {
    return prefix[static_cast<std::size_t>(b + 1)] - prefix[static_cast<std::size_t>(a)];
  };
  return min_max_partition(blocks, stages, cost, [](int, int, int) { return true; }, 200);
}

json prediction_json(const ModelProfile& profile, const RankTopology& topology,
                     const PipelineLayout& layout, std::int64_t cap) {
  const auto p = predict(profile, topology, layout);
  if (!p.ok()) return {{"error", p.status().message()}};
  const std::int64_t peak =
      *std::max_element(p->peak_memory_bytes.begin(), p->peak_memory_bytes.end());
  json stages = json::array();
  for (const StageRange& r : layout.stages) stages.push_back(r.last - r.first + 1);
  return {{"iteration_s", p->iteration_s},
          {"bubble_fraction", p->bubble_fraction},
          {"peak_memory_bytes", peak},
          {"fits_cap", peak <= cap},
          {"blocks_per_stage", stages}};
}

json compare(const ModelProfile& profile, const RankTopology& topology, std::int64_t batch,
             std::int64_t cap) {
  PlanRequest q;
  q.profile = profile;
  q.topology = topology;
  q.global_batch = batch;
  q.memory_cap_bytes = cap;
  const auto t0 = std::chrono::steady_clock::now();
  const auto plan = make_plan(q);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  json out = {{"profile", profile.model},
              {"blocks", profile.blocks.size()},
              {"ranks", topology.ranks},
              {"global_batch", batch},
              {"memory_cap_bytes", cap}};
  if (!plan.ok()) {
    out["error"] = plan.status().message();
    return out;
  }
  const int n = static_cast<int>(profile.blocks.size());
  const int S = plan->pipeline_ranks * plan->chunks;
  out["planning_s"] = seconds;
  out["plan"] = {{"P", plan->pipeline_ranks},
                 {"R", plan->replicas},
                 {"v", plan->chunks},
                 {"m", plan->microbatches},
                 {"schedule", plan->schedule},
                 {"simulated", plan->simulated},
                 {"exact", plan->exact},
                 {"mapping_lower_bound_s", plan->mapping_lower_bound_s},
                 {"candidates", plan->candidates},
                 {"simulations", plan->simulations},
                 {"explanation", plan->explanation}};
  out["planner"] = prediction_json(profile, topology, *plan, cap);
  PipelineLayout same = *plan;
  same.stages = uniform_split(n, S);
  out["uniform"] = prediction_json(profile, topology, same, cap);
  same.stages = balanced_split(n, S, [&](int i) {
    return static_cast<double>(profile.blocks[static_cast<std::size_t>(i)].parameter_bytes);
  });
  out["parameters"] = prediction_json(profile, topology, same, cap);
  same.stages = balanced_split(n, S, [&](int i) {
    const BlockProfile& b = profile.blocks[static_cast<std::size_t>(i)];
    return b.forward_s + b.backward_input_s + b.backward_weight_s;
  });
  out["time"] = prediction_json(profile, topology, same, cap);
  return out;
}

json planning_time(int repeats) {
  const ModelProfile profile = thousand_blocks();
  const RankTopology topology = *synthetic_topology(64, 16, {2e10, 2e-6}, {1.25e10, 5e-6});
  PlanRequest q;
  q.profile = profile;
  q.topology = topology;
  q.global_batch = 2048;
  q.memory_cap_bytes = 32 * GiB;
  std::vector<double> seconds;
  json out;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto plan = make_plan(q);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (!plan.ok()) return {{"error", plan.status().message()}};
    out["plan"] = {{"P", plan->pipeline_ranks}, {"R", plan->replicas}, {"v", plan->chunks},
                   {"m", plan->microbatches},   {"schedule", plan->schedule},
                   {"iteration_s", plan->iteration_s}, {"simulated", plan->simulated},
                   {"candidates", plan->candidates}, {"simulations", plan->simulations},
                   {"explanation", plan->explanation}};
  }
  std::sort(seconds.begin(), seconds.end());
  out["blocks"] = 1000;
  out["ranks"] = topology.ranks;
  out["global_batch"] = q.global_batch;
  out["memory_cap_bytes"] = *q.memory_cap_bytes;
  out["planning_s"] = seconds;
  out["median_planning_s"] = seconds[seconds.size() / 2];
  out["goal_s"] = 1.0;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 2) {
    std::fprintf(stderr, "usage: bench_planner [OUT.json]\n");
    return 2;
  }
  // 4 nodes x 4 ranks: 20 GB/s inside a node, 2.5 GB/s between nodes.
  const RankTopology cluster = *synthetic_topology(4, 4, {2e10, 2e-6}, {2.5e9, 1e-5});
  json out;
  out["topology"] = "4 nodes x 4 ranks, intra 20 GB/s 2 us, inter 2.5 GB/s 10 us";
  out["comparisons"] = json::array({compare(uniform_transformer(), cluster, 64, 19 * GiB / 2),
                                    compare(heavy_ends(), cluster, 64, 24 * GiB),
                                    compare(random_profile(40, 3), cluster, 64, 16 * GiB)});
  out["scale"] = planning_time(3);
  const std::string text = out.dump(2) + "\n";
  if (argc == 2) {
    std::ofstream file(argv[1]);
    file << text;
    if (!file.flush()) {
      std::fprintf(stderr, "bench_planner: cannot write %s\n", argv[1]);
      return 1;
    }
  } else {
    std::cout << text;
  }
  return 0;
}
