#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "kernels/memory_ledger.hpp"
#include "kernels/tensor.hpp"

namespace spw {
namespace {

TEST(MemoryLedger, TracksCurrentAndPeakPerCategory) {
  MemoryLedger ledger;
  ASSERT_TRUE(ledger.reserve(MemoryCategory::parameters, 100).ok());
  ASSERT_TRUE(ledger.reserve(MemoryCategory::stash, 300).ok());
  ledger.release(MemoryCategory::stash, 200);
  ASSERT_TRUE(ledger.reserve(MemoryCategory::workspace, 50).ok());

  const LedgerSnapshot s = ledger.snapshot();
  EXPECT_EQ(s.current_of(MemoryCategory::parameters), 100u);
  EXPECT_EQ(s.current_of(MemoryCategory::stash), 100u);
  EXPECT_EQ(s.peak_of(MemoryCategory::stash), 300u);
  EXPECT_EQ(s.current_of(MemoryCategory::workspace), 50u);
  EXPECT_EQ(s.current_total, 250u);
  // The total's high-water mark is 400 (100 + 300), not the sum of per-category peaks (450).
  EXPECT_EQ(s.peak_total, 400u);
}

TEST(MemoryLedger, CapRejectsWithExactMessageAndLeavesLedgerUnchanged) {
  MemoryLedger ledger;
  ASSERT_TRUE(ledger.set_cap(1000).ok());
  ASSERT_TRUE(ledger.reserve(MemoryCategory::gradients, 600).ok());
  const Status status = ledger.reserve(MemoryCategory::stash, 500);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::memory_cap);
  EXPECT_EQ(status.message(),
            "memory cap exceeded: need 500 bytes for stash, cap 1000, in use 600");
  EXPECT_EQ(ledger.current_total(), 600u);
  EXPECT_EQ(ledger.snapshot().current_of(MemoryCategory::stash), 0u);
  // Exactly filling the cap is allowed.
  EXPECT_TRUE(ledger.reserve(MemoryCategory::stash, 400).ok());
  EXPECT_EQ(ledger.peak_total(), 1000u);
}

// The executor's use: memory that copies in flight will free is released by the handler
// when a reservation would pass the cap, and the reservation then succeeds.
TEST(MemoryLedger, PressureHandlerFreesMemoryAndTheReservationIsRetried) {
  MemoryLedger ledger;
  ASSERT_TRUE(ledger.set_cap(1000).ok());
  ASSERT_TRUE(ledger.reserve(MemoryCategory::stash, 800).ok());
  int owner = 0;
  std::vector<std::size_t> asked;
  ledger.set_pressure_handler(&owner, [&](std::size_t bytes) {
    asked.push_back(bytes);
    ledger.release(MemoryCategory::stash, 500);
  });
  ASSERT_TRUE(ledger.reserve(MemoryCategory::workspace, 100).ok());  // fits: no call
  EXPECT_TRUE(asked.empty());
  ASSERT_TRUE(ledger.reserve(MemoryCategory::workspace, 400).ok());
  EXPECT_EQ(asked, std::vector<std::size_t>{400});
  EXPECT_EQ(ledger.current_total(), 800u);
  // The peak is what was held at once: 900, never past the cap.
  EXPECT_EQ(ledger.peak_total(), 900u);
}

TEST(MemoryLedger, PressureHandlerThatFreesTooLittleLeavesTheCapError) {
  MemoryLedger ledger;
  ASSERT_TRUE(ledger.set_cap(1000).ok());
  ASSERT_TRUE(ledger.reserve(MemoryCategory::stash, 900).ok());
  int owner = 0, calls = 0, nested = 0;
  ledger.set_pressure_handler(&owner, [&](std::size_t) {
    ++calls;
    // A reservation inside the handler does not call it again.
    if (!ledger.reserve(MemoryCategory::workspace, 500).ok()) ++nested;
    ledger.release(MemoryCategory::stash, 50);
  });
  const Status status = ledger.reserve(MemoryCategory::workspace, 200);
  EXPECT_EQ(status.message(),
            "memory cap exceeded: need 200 bytes for workspace, cap 1000, in use 850");
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(nested, 1);
  EXPECT_EQ(ledger.current_total(), 850u);
}

TEST(MemoryLedger, PressureHandlerRunsOnlyOnItsThreadAndOnlyItsOwnerClearsIt) {
  MemoryLedger ledger;
  ASSERT_TRUE(ledger.set_cap(100).ok());
  int owner = 0, stranger = 0, calls = 0;
  ledger.set_pressure_handler(&owner, [&](std::size_t) { ++calls; });
  Status from_other_thread = Status::success();
  std::thread([&] { from_other_thread = ledger.reserve(MemoryCategory::stash, 200); }).join();
  EXPECT_EQ(from_other_thread.code(), StatusCode::memory_cap);
  EXPECT_EQ(calls, 0);
  ledger.clear_pressure_handler(&stranger);
  EXPECT_FALSE(ledger.reserve(MemoryCategory::stash, 200).ok());
  EXPECT_EQ(calls, 1);
  ledger.clear_pressure_handler(&owner);
  EXPECT_FALSE(ledger.reserve(MemoryCategory::stash, 200).ok());
  EXPECT_EQ(calls, 1);
}

TEST(MemoryLedger, CapBelowUsageIsRefused) {
  MemoryLedger ledger;
  ASSERT_TRUE(ledger.reserve(MemoryCategory::parameters, 700).ok());
  const Status status = ledger.set_cap(500);
  EXPECT_EQ(status.code(), StatusCode::memory_cap);
  EXPECT_NE(status.message().find("below the 700 bytes already in use"), std::string::npos);
  EXPECT_FALSE(ledger.cap().has_value());
}

TEST(MemoryLedger, ReservedTotalCountsEveryReservationFreedOrNot) {
  MemoryLedger ledger;
  ASSERT_TRUE(ledger.set_cap(1000).ok());
  ASSERT_TRUE(ledger.reserve(MemoryCategory::stash, 600).ok());
  ledger.release(MemoryCategory::stash, 600);
  ASSERT_TRUE(ledger.reserve(MemoryCategory::workspace, 300).ok());
  EXPECT_FALSE(ledger.reserve(MemoryCategory::stash, 800).ok());  // refused: not counted
  ledger.reset_peaks();
  EXPECT_EQ(ledger.reserved_total(), 900u);
  EXPECT_EQ(ledger.snapshot().reserved_total, 900u);
}

TEST(MemoryLedger, ResetPeaksStartsFromCurrentUse) {
  MemoryLedger ledger;
  ASSERT_TRUE(ledger.reserve(MemoryCategory::workspace, 900).ok());
  ledger.release(MemoryCategory::workspace, 800);
  ledger.reset_peaks();
  EXPECT_EQ(ledger.peak_total(), 100u);
  EXPECT_EQ(ledger.snapshot().peak_of(MemoryCategory::workspace), 100u);
}

TEST(MemoryLedger, TensorAllocationsAreAccountedAndCapped) {
  MemoryLedger& ledger = MemoryLedger::process();
  const std::size_t before = ledger.snapshot().current_of(MemoryCategory::optimizer_state);
  {
    auto t = Tensor::zeros(Shape{64, 32}, MemoryCategory::optimizer_state);
    ASSERT_TRUE(t.ok()) << t.status().message();
    EXPECT_EQ(ledger.snapshot().current_of(MemoryCategory::optimizer_state),
              before + 64 * 32 * sizeof(float));
  }
  EXPECT_EQ(ledger.snapshot().current_of(MemoryCategory::optimizer_state), before);

  const std::size_t in_use = ledger.current_total();
  ASSERT_TRUE(ledger.set_cap(in_use + 4096).ok());
  auto too_big = Tensor::zeros(Shape{1024, 2}, MemoryCategory::stash);  // 8192 bytes
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().message(),
            "memory cap exceeded: need 8192 bytes for stash, cap " +
                std::to_string(in_use + 4096) + ", in use " + std::to_string(in_use));
  EXPECT_EQ(ledger.current_total(), in_use);
  ASSERT_TRUE(ledger.set_cap(std::nullopt).ok());
}

// Two ranks of one node: two ledgers sharing one counter, as MPI shared memory shares it.
TEST(MemoryLedger, NodeBudgetRefusesWhatTheNodesRanksTogetherCannotHold) {
  alignas(8) std::uint64_t shared = 0;
  NodeMemoryBudget budget{1000, "a test's figure", 2, &shared};
  MemoryLedger first;
  MemoryLedger second;
  ASSERT_TRUE(first.reserve(MemoryCategory::parameters, 100).ok());
  ASSERT_TRUE(first.set_node_budget(budget).ok());
  ASSERT_TRUE(second.set_node_budget(budget).ok());
  EXPECT_EQ(shared, 100u) << "what a ledger held before the budget counts";
  ASSERT_TRUE(first.reserve(MemoryCategory::gradients, 500).ok());
  EXPECT_EQ(shared, 600u);

  const Status status = second.reserve(MemoryCategory::stash, 500);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::out_of_memory);
  EXPECT_EQ(status.message(),
            "this node's memory exceeded: need 500 B for stash, the node's budget is 1000 B (a "
            "test's figure) and its 2 ranks hold 600 B: spread the model over more ranks or "
            "nodes (parallel.stages), or cap each rank (memory.cap) and offload its stashes "
            "(offload.tier)");
  EXPECT_EQ(second.current_total(), 0u);
  EXPECT_EQ(shared, 600u) << "a refused reservation takes nothing";
  EXPECT_TRUE(second.reserve(MemoryCategory::stash, 400).ok()) << "exactly the budget fits";

  first.release(MemoryCategory::gradients, 500);
  EXPECT_EQ(shared, 500u);
  EXPECT_TRUE(second.check_node_headroom(500, "x").ok());
  const Status headroom = second.check_node_headroom(501, "501 B for a model");
  ASSERT_FALSE(headroom.ok());
  EXPECT_EQ(headroom.code(), StatusCode::out_of_memory);
  EXPECT_NE(headroom.message().find("need 501 B for a model, the node's budget is 1000 B"),
            std::string::npos)
      << headroom.message();
  EXPECT_EQ(shared, 500u) << "a check reserves nothing";

  ASSERT_TRUE(second.set_node_budget(std::nullopt).ok());
  EXPECT_EQ(shared, 100u) << "a ledger leaving the budget takes its bytes with it";
  EXPECT_TRUE(second.reserve(MemoryCategory::stash, 5000).ok()) << "no budget, no limit";
  EXPECT_EQ(shared, 100u);
  EXPECT_TRUE(second.check_node_headroom(1u << 30, "x").ok());
}

TEST(MemoryLedger, OneRanksNodeBudgetSaysThisRankAndTheCapStillComesFirst) {
  alignas(8) std::uint64_t shared = 0;
  MemoryLedger ledger;
  ASSERT_TRUE(ledger.set_cap(300).ok());
  ASSERT_TRUE(ledger.set_node_budget(NodeMemoryBudget{200, "f", 1, &shared}).ok());
  const Status over_cap = ledger.reserve(MemoryCategory::parameters, 400);
  EXPECT_EQ(over_cap.code(), StatusCode::memory_cap) << over_cap.message();
  ASSERT_TRUE(ledger.reserve(MemoryCategory::parameters, 150).ok());
  const Status over_node = ledger.reserve(MemoryCategory::workspace, 100);
  EXPECT_EQ(over_node.code(), StatusCode::out_of_memory);
  EXPECT_NE(over_node.message().find("and this rank holds 150 B:"), std::string::npos)
      << over_node.message();
  ASSERT_TRUE(ledger.set_node_budget(std::nullopt).ok());
}

TEST(MemoryLedger, NodeBudgetWithoutAnAlignedCounterIsRefused) {
  MemoryLedger ledger;
  const Status none = ledger.set_node_budget(NodeMemoryBudget{100, "f", 1, nullptr});
  EXPECT_EQ(none.code(), StatusCode::invalid_argument);
  EXPECT_EQ(none.message(), "a node memory budget needs a shared counter aligned to 8 bytes");
  alignas(8) unsigned char bytes[16] = {};
  const Status misaligned = ledger.set_node_budget(
      NodeMemoryBudget{100, "f", 1, reinterpret_cast<std::uint64_t*>(bytes + 1)});
  EXPECT_EQ(misaligned.code(), StatusCode::invalid_argument);
  EXPECT_FALSE(ledger.has_node_budget());
}

TEST(ByteCounts, ParseAndFormat) {
  EXPECT_EQ(*parse_bytes("4096"), 4096u);
  EXPECT_EQ(*parse_bytes("8GiB"), 8ull << 30);
  EXPECT_EQ(*parse_bytes("512 MiB"), 512ull << 20);
  EXPECT_EQ(*parse_bytes("1.5G"), 3ull << 29);
  EXPECT_EQ(*parse_bytes("2kb"), 2048u);
  const auto bad = parse_bytes("eight gigs");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'eight gigs'"), std::string::npos);
  EXPECT_FALSE(parse_bytes("12 parsecs").ok());
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(3ull << 29), "1.50 GiB");
}

}  // namespace
}  // namespace spw
