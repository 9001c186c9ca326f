#include <gtest/gtest.h>
#include <hwloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "kernels/memory_ledger.hpp"
#include "kernels/numa_allocator.hpp"
#include "kernels/tensor.hpp"
#include "kernels/topology.hpp"

namespace spw {
namespace {

// The logical NUMA node holding the pages of [data, data + bytes), as the kernel reports it.
std::optional<int> node_of_area(const Topology& topology, const void* data, std::size_t bytes) {
  hwloc_bitmap_t nodes = hwloc_bitmap_alloc();
  std::optional<int> result;
  if (hwloc_get_area_memlocation(topology.handle(), data, bytes, nodes,
                                 HWLOC_MEMBIND_BYNODESET) == 0 &&
      hwloc_bitmap_weight(nodes) == 1) {
    hwloc_obj_t node = hwloc_get_numanode_obj_by_os_index(
        topology.handle(), static_cast<unsigned>(hwloc_bitmap_first(nodes)));
    if (node) result = static_cast<int>(node->logical_index);
  }
  hwloc_bitmap_free(nodes);
  return result;
}

hwloc_bitmap_t pus(std::initializer_list<unsigned> indexes) {
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  for (unsigned i : indexes) hwloc_bitmap_set(set, i);
  return set;
}

TEST(NumaAllocator, LocalAllocationIsTouchedAndOnTheThreadsNode) {
  auto topology = Topology::process();
  ASSERT_TRUE(topology.ok());
  constexpr std::size_t kBytes = 8 << 20;
  auto allocation = allocate(kBytes, MemoryCategory::workspace);
  ASSERT_TRUE(allocation.ok()) << allocation.status().message();
  const auto* bytes = static_cast<const unsigned char*>((*allocation)->data());
  for (std::size_t i = 0; i < kBytes; i += 4096) ASSERT_EQ(bytes[i], 0);

  const auto expected = (*topology)->numa_node_of_calling_thread();
  if ((*topology)->numa_node_count() == 1 || expected) {
    const int want = expected.value_or(0);
    EXPECT_EQ((*allocation)->bound_node(), want);
    EXPECT_EQ(node_of_area(**topology, bytes, kBytes), want);
  }
}

TEST(NumaAllocator, RejectsANodeTheMachineDoesNotHave) {
  auto topology = Topology::process();
  ASSERT_TRUE(topology.ok());
  const int missing = (*topology)->numa_node_count();
  const std::size_t before = MemoryLedger::process().current_total();
  auto allocation = allocate(4096, MemoryCategory::stash, MemoryPlacement::on_node(missing));
  ASSERT_FALSE(allocation.ok());
  EXPECT_EQ(allocation.status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(allocation.status().message(),
            "cannot place memory on NUMA node " + std::to_string(missing) +
                ": this machine has " + std::to_string(missing) + " NUMA node(s)");
  EXPECT_EQ(MemoryLedger::process().current_total(), before);
}

TEST(NumaAllocator, SeparateLedgerAccountsAndReleases) {
  MemoryLedger ledger;
  {
    auto a = allocate(12345, MemoryCategory::communication, {}, FirstTouch::none, ledger);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(ledger.snapshot().current_of(MemoryCategory::communication), 12345u);
  }
  EXPECT_EQ(ledger.current_total(), 0u);
  EXPECT_EQ(ledger.peak_total(), 12345u);
}

// The process-wide tally the profiler reads: what live ScratchBuffers hold, on any thread,
// in the ledger's workspace as well.
TEST(ScratchBuffer, GrowsOnlyWhenAskedForMoreAndTheTallyFollowsItsLife) {
  const std::size_t start = scratch_buffer_bytes();
  const auto workspace_in_use = [] {
    return MemoryLedger::process().snapshot().current_of(MemoryCategory::workspace);
  };
  const std::size_t workspace = workspace_in_use();
  {
    ScratchBuffer scratch;
    auto first = scratch.reserve(4096);
    ASSERT_TRUE(first.ok()) << first.status().message();
    EXPECT_EQ(scratch_buffer_bytes(), start + 4096);
    auto smaller = scratch.reserve(100);
    ASSERT_TRUE(smaller.ok());
    EXPECT_EQ(*smaller, *first);  // kept, not reallocated
    EXPECT_EQ(scratch_buffer_bytes(), start + 4096);
    ASSERT_TRUE(scratch.reserve(3 * 4096).ok());
    EXPECT_EQ(scratch_buffer_bytes(), start + 3 * 4096);
    EXPECT_EQ(workspace_in_use(), workspace + 3 * 4096);
    std::thread([&] {
      thread_local ScratchBuffer other;
      ASSERT_TRUE(other.reserve(4096).ok());
      EXPECT_EQ(scratch_buffer_bytes(), start + 4 * 4096);
    }).join();  // the thread's buffer goes with the thread
    EXPECT_EQ(scratch_buffer_bytes(), start + 3 * 4096);
  }
  EXPECT_EQ(scratch_buffer_bytes(), start);
  EXPECT_EQ(workspace_in_use(), workspace);
}

TEST(Topology, NodeOfCpusetOnASyntheticTwoNodeMachine) {
  auto topology = Topology::synthetic("pack:2 [numa] core:4 pu:1");
  ASSERT_TRUE(topology.ok()) << topology.status().message();
  const Topology& t = **topology;
  EXPECT_FALSE(t.is_this_system());
  ASSERT_EQ(t.numa_node_count(), 2);
  EXPECT_EQ(t.core_count(), 8);

  hwloc_bitmap_t second_package = pus({4, 5, 6, 7});
  hwloc_bitmap_t first_core = pus({0});
  hwloc_bitmap_t straddling = pus({3, 4});
  EXPECT_EQ(t.numa_node_of_cpuset(second_package), 1);
  EXPECT_EQ(t.numa_node_of_cpuset(first_core), 0);
  EXPECT_EQ(t.numa_node_of_cpuset(straddling), std::nullopt);
  hwloc_bitmap_free(second_package);
  hwloc_bitmap_free(first_core);
  hwloc_bitmap_free(straddling);

  EXPECT_EQ(t.capacity_node_for(0), 1);
  EXPECT_EQ(t.capacity_node_for(1), 0);
  for (const auto& node : t.numa_nodes()) EXPECT_EQ(node.core_count, 4);
}

TEST(Topology, SyntheticDescriptionErrorsNameTheText) {
  auto topology = Topology::synthetic("pack:two");
  ASSERT_FALSE(topology.ok());
  EXPECT_NE(topology.status().message().find("'pack:two'"), std::string::npos);
}

// Pages of [data, data + bytes) in memory (mincore).
std::size_t resident_pages(const void* data, std::size_t bytes) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const auto start = reinterpret_cast<std::uintptr_t>(data) / page * page;
  const std::size_t length = reinterpret_cast<std::uintptr_t>(data) + bytes - start;
  std::vector<unsigned char> in((length + page - 1) / page);
  if (::mincore(reinterpret_cast<void*>(start), length, in.data()) != 0) return 0;
  std::size_t count = 0;
  for (unsigned char r : in) count += r & 1;
  return count;
}

// An uninitialized tensor is accounted as zeros is, but its pages stay untouched for
// whoever fills it (the offload engine bringing a stash back).
TEST(Tensor, UninitializedIsAccountedButLeftUntouched) {
  const Shape shape{256, 2048};  // 2 MiB
  const std::size_t before = MemoryLedger::process().snapshot().current_of(MemoryCategory::stash);
  auto zeros = Tensor::zeros(shape, MemoryCategory::stash);
  auto fresh = Tensor::uninitialized(shape, MemoryCategory::stash);
  ASSERT_TRUE(zeros.ok() && fresh.ok());
  EXPECT_EQ(fresh->shape(), shape);
  EXPECT_EQ(MemoryLedger::process().snapshot().current_of(MemoryCategory::stash),
            before + 2 * fresh->bytes());
  EXPECT_EQ(resident_pages(zeros->data(), zeros->bytes()), zeros->bytes() / 4096);
  EXPECT_EQ(resident_pages(fresh->data(), fresh->bytes()), 0u);
}

}  // namespace
}  // namespace spw
