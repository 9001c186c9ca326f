// What a rank checks about its node's memory before it builds a model: the node's figure
// (read from files laid out like /proc and /sys/fs/cgroup) and the model's bytes without
// building it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "kernels/memory_ledger.hpp"
#include "runtime/available_memory.hpp"
#include "runtime/model.hpp"
#include "runtime/node_memory_budget.hpp"
#include "tests/temp_dir.hpp"

namespace spw {
namespace {

void write(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

// MemAvailable 8 GiB, SwapFree 1 GiB, in KiB as the kernel writes them.
const char* const kMeminfo =
    "MemTotal:       16777216 kB\nMemFree:         1048576 kB\n"
    "MemAvailable:    8388608 kB\nSwapTotal:       2097152 kB\nSwapFree:        1048576 kB\n";

MemoryFactFiles files_in(const TempDir& dir) {
  return {dir.file("meminfo"), dir.file("cgroup"), dir.file("sys")};
}

TEST(AvailableMemory, TheMachinesFigureIsMemAvailablePlusSwapFree) {
  TempDir dir("spw-mem");
  write(dir.file("meminfo"), kMeminfo);
  const auto available = available_memory(files_in(dir));  // no cgroup file at all
  ASSERT_TRUE(available.has_value());
  EXPECT_EQ(available->bytes, std::size_t{9} << 30);
  EXPECT_EQ(available->source, "MemAvailable + SwapFree in " + dir.file("meminfo"));
}

TEST(AvailableMemory, WithoutMemAvailableNothingIsKnown) {
  TempDir dir("spw-mem");
  EXPECT_FALSE(available_memory(files_in(dir)).has_value()) << "no meminfo";
  write(dir.file("meminfo"), "MemTotal: 16777216 kB\nMemFree: 1048576 kB\n");
  EXPECT_FALSE(available_memory(files_in(dir)).has_value()) << "a kernel before 3.14";
}

// Slurm's cgroup v2 layout: the job's limit binds, and a tighter ancestor binds more.
TEST(AvailableMemory, ACgroupV2LimitLessWhatItHoldsBindsAndSoDoItsAncestors) {
  TempDir dir("spw-mem");
  write(dir.file("meminfo"), kMeminfo);
  write(dir.file("cgroup"), "0::/slurm/job_7/step_0\n");
  const std::string sys = dir.file("sys");
  write(sys + "/cgroup.controllers", "cpu memory\n");
  write(sys + "/slurm/job_7/step_0/memory.max", "max\n");
  write(sys + "/slurm/job_7/memory.max", std::to_string(std::size_t{4} << 30) + "\n");
  // 1.5 GiB in use of which 0.5 GiB page cache: 1 GiB held, 3 GiB left.
  write(sys + "/slurm/job_7/memory.current", std::to_string(std::size_t{3} << 29) + "\n");
  write(sys + "/slurm/job_7/memory.stat",
        "anon 1073741824\nfile " + std::to_string(std::size_t{1} << 29) + "\nkernel 0\n");
  auto available = available_memory(files_in(dir));
  ASSERT_TRUE(available.has_value());
  EXPECT_EQ(available->bytes, std::size_t{3} << 30);
  EXPECT_EQ(available->source, "the memory cgroup /slurm/job_7 (limit 4.00 GiB, 1.00 GiB held)");

  write(sys + "/slurm/memory.max", std::to_string(std::size_t{2} << 30) + "\n");
  available = available_memory(files_in(dir));
  ASSERT_TRUE(available.has_value());
  EXPECT_EQ(available->bytes, std::size_t{2} << 30) << "nothing counted as held there";
  EXPECT_EQ(available->source, "the memory cgroup /slurm (limit 2.00 GiB, 0 B held)");

  write(sys + "/slurm/memory.max", std::to_string(std::size_t{64} << 30) + "\n");
  write(sys + "/slurm/job_7/memory.max", std::to_string(std::size_t{32} << 30) + "\n");
  available = available_memory(files_in(dir));
  ASSERT_TRUE(available.has_value());
  EXPECT_EQ(available->bytes, std::size_t{9} << 30) << "limits above the machine's figure";
}

TEST(AvailableMemory, ACgroupV1MemoryLimitBindsAndItsNoLimitDoesNot) {
  TempDir dir("spw-mem");
  write(dir.file("meminfo"), kMeminfo);
  write(dir.file("cgroup"), "5:cpu,cpuacct:/\n4:memory,hugetlb:/pbs.7\n0::/\n");
  const std::string group = dir.file("sys") + "/memory/pbs.7";
  write(group + "/memory.limit_in_bytes", "9223372036854771712\n");
  write(group + "/memory.usage_in_bytes", "1000\n");
  auto available = available_memory(files_in(dir));
  ASSERT_TRUE(available.has_value());
  EXPECT_EQ(available->bytes, std::size_t{9} << 30) << "v1's no-limit is a number near 2^63";

  write(group + "/memory.limit_in_bytes", std::to_string(std::size_t{1} << 30) + "\n");
  write(group + "/memory.usage_in_bytes", std::to_string(std::size_t{1} << 28) + "\n");
  write(group + "/memory.stat",
        "cache 1\ntotal_cache " + std::to_string(std::size_t{1} << 27) + "\ntotal_rss 5\n");
  available = available_memory(files_in(dir));
  ASSERT_TRUE(available.has_value());
  EXPECT_EQ(available->bytes, (std::size_t{1} << 30) - (std::size_t{1} << 27));
  EXPECT_EQ(available->source, "the memory cgroup /pbs.7 (limit 1.00 GiB, 128.0 MiB held)");
}

TEST(AvailableMemory, ThisMachineHasAFigure) {
  const auto available = available_memory();
  ASSERT_TRUE(available.has_value()) << "Linux has had MemAvailable since 3.14";
  EXPECT_GT(available->bytes, 0u);
}

TEST(NodeMemoryBudget, KeepsASixteenthAnd256MiBARankOutOfTheBudget) {
  const std::size_t gib = std::size_t{1} << 30;
  EXPECT_EQ(node_memory_budget_bytes(16 * gib, 1), 15 * gib - gib / 4);
  EXPECT_EQ(node_memory_budget_bytes(16 * gib, 4), 14 * gib);
  EXPECT_EQ(node_memory_budget_bytes(gib / 4, 1), 0u) << "nothing left: no room at all";
}

// spillway plan's share: each node's budget over its ranks, the smallest over the nodes,
// and nothing where a node's memory is unknown.
TEST(NodeMemoryBudget, APlansShareIsTheSmallestNodesBudgetOverItsRanks) {
  const std::size_t gib = std::size_t{1} << 30;
  sched::RankTopology topology;
  topology.ranks = 5;
  topology.node_of = {0, 0, 1, 1, 1};
  EXPECT_EQ(planned_node_share(topology, {16 * gib, 16 * gib}),
            node_memory_budget_bytes(16 * gib, 3) / 3);
  EXPECT_EQ(planned_node_share(topology, {4 * gib, 16 * gib}),
            node_memory_budget_bytes(4 * gib, 2) / 2);
  EXPECT_EQ(planned_node_share(topology, {16 * gib, 0}), std::nullopt);
  EXPECT_EQ(planned_node_share(topology, {16 * gib}), std::nullopt);
  EXPECT_EQ(planned_node_share(topology, {}), std::nullopt);
}

ModelSpec gpt(std::int64_t layers, std::int64_t d, std::int64_t heads) {
  ModelSpec spec;
  spec.gpt.layers = layers;
  spec.gpt.d_model = d;
  spec.gpt.heads = heads;
  spec.gpt.seq = 16;
  spec.gpt.vocab = 50;
  return spec;
}

std::int64_t built_count(const ModelSpec& spec, std::int64_t first, std::int64_t last) {
  auto model = Model::build(spec, first, last);
  EXPECT_TRUE(model.ok()) << model.status().message();
  return model.ok() ? static_cast<std::int64_t>((*model)->parameter_count()) : -1;
}

// The count a rank checks before building must be the count it then builds, for every
// kind of block and every stage a pipeline can give a rank.
TEST(ModelSpecParameterCount, EqualsTheBuiltModelsForEveryRangeOfBlocks) {
  ModelSpec split = gpt(4, 32, 4);
  split.splits = {{1, 1}, {2, 3}};
  ModelSpec mlp;
  mlp.kind = "mlp";
  mlp.dims = {7, 12, 5, 3};
  for (const ModelSpec& spec : {gpt(3, 16, 2), gpt(2, 24, 3), split, mlp}) {
    const std::int64_t blocks = spec.block_count();
    for (std::int64_t first = 0; first < blocks; ++first) {
      for (std::int64_t last = first; last < blocks; ++last) {
        EXPECT_EQ(spec.parameter_count(first, last), built_count(spec, first, last))
            << spec.describe() << " blocks " << first << "-" << last;
      }
    }
  }
  // gpt-s: 8 layers of 12 d^2 + 13 d, the embedding's (256 + 128) d, the head's 258 d.
  ModelSpec s = gpt(8, 256, 8);
  s.gpt.seq = 128;
  s.gpt.vocab = 256;
  EXPECT_EQ(s.parameter_count(0, s.block_count() - 1),
            8 * (12 * 256 * 256 + 13 * 256) + 384 * 256 + 258 * 256);
}

TEST(BlockMemory, CountsGradientsAndEachOptimizersState) {
  const ModelSpec spec = gpt(2, 16, 2);
  const std::int64_t last = spec.block_count() - 1;
  const auto parameters = static_cast<std::size_t>(spec.parameter_count(0, last));
  OptimizerSettings adamw;
  OptimizerSettings sgd;
  sgd.kind = "sgd";
  OptimizerSettings momentum = sgd;
  momentum.momentum = 0.9;
  EXPECT_EQ(block_memory(spec, 0, last, true, &adamw).bytes, 16 * parameters);
  EXPECT_EQ(block_memory(spec, 0, last, true, &momentum).bytes, 12 * parameters);
  EXPECT_EQ(block_memory(spec, 0, last, true, &sgd).bytes, 8 * parameters);
  EXPECT_EQ(block_memory(spec, 0, last, true, nullptr).bytes, 8 * parameters);
  const BlockMemory forward = block_memory(spec, 0, last, false, nullptr);
  EXPECT_EQ(forward.bytes, 4 * parameters);
  EXPECT_EQ(forward.parameters, parameters);
  EXPECT_EQ(forward.holds, "parameters");
  EXPECT_EQ(block_memory(spec, 0, last, true, &adamw).holds,
            "parameters, gradients and optimizer state");
}

TEST(BlockMemory, AModelPastTheNodeBudgetIsRefusedBeforeItIsBuilt) {
  alignas(8) std::uint64_t shared = 0;
  MemoryLedger& ledger = MemoryLedger::process();
  ASSERT_TRUE(ledger.set_node_budget(NodeMemoryBudget{1000, "a test's figure", 1, &shared}).ok());
  const ModelSpec spec = gpt(2, 16, 2);
  OptimizerSettings adamw;
  const Status status = check_blocks_fit_node(
      block_memory(spec, 0, spec.block_count() - 1, true, &adamw), "the model");
  ASSERT_TRUE(ledger.set_node_budget(std::nullopt).ok());
  EXPECT_EQ(status.code(), StatusCode::out_of_memory);
  const std::string parameters = std::to_string(spec.parameter_count(0, spec.block_count() - 1));
  EXPECT_NE(status.message().find("need " + format_bytes(16 * std::stoull(parameters)) +
                                  " for the parameters, gradients and optimizer state of the "
                                  "model (" +
                                  parameters + " parameters), the node's budget is 1000 B"),
            std::string::npos)
      << status.message();
  EXPECT_TRUE(check_blocks_fit_node(block_memory(spec, 0, 0, false, nullptr), "x").ok())
      << "no budget, nothing refused";
}

}  // namespace
}  // namespace spw
