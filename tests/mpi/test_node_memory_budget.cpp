// The ranks of one node share one memory budget: what one rank holds leaves less for the
// others, and the check before building a model sums the node's ranks.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "kernels/memory_ledger.hpp"
#include "runtime/node_memory_budget.hpp"

namespace spw {
namespace {

constexpr std::size_t kAvailable = std::size_t{12} << 30;

// Rank 0 writes a meminfo whose MemAvailable is kAvailable; every rank gets its path.
MemoryFactFiles fake_node(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  long pid = static_cast<long>(::getpid());
  MPI_Bcast(&pid, 1, MPI_LONG, 0, comm);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("spillway-node-memory-" + std::to_string(pid));
  if (rank == 0) {
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "meminfo")
        << "MemTotal: 99999999 kB\nMemAvailable: " << kAvailable / 1024 << " kB\nSwapFree: 0 kB\n";
  }
  MPI_Barrier(comm);
  return {(dir / "meminfo").string(), (dir / "no-cgroup").string(), (dir / "no-sys").string()};
}

TEST(NodeMemoryBudget, TheNodesRanksShareOneBudget) {
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const MemoryFactFiles files = fake_node(MPI_COMM_WORLD);
  MemoryLedger& ledger = MemoryLedger::process();
  const std::size_t held_before = ledger.current_total();
  {
    auto scope = NodeMemoryBudgetScope::install(MPI_COMM_WORLD, files);
    ASSERT_TRUE(scope.ok()) << scope.status().message();
    ASSERT_TRUE((*scope)->active());
    ASSERT_TRUE(ledger.has_node_budget());
    const std::size_t budget = node_memory_budget_bytes(kAvailable, size);

    // A second scope finds the budget set and leaves it alone.
    auto again = NodeMemoryBudgetScope::install(MPI_COMM_WORLD, files);
    ASSERT_TRUE(again.ok()) << again.status().message();
    EXPECT_FALSE((*again)->active());

    // Every rank takes a share; then the last rank cannot take what the others hold.
    const std::size_t share = budget / static_cast<std::size_t>(size) - held_before - 4096;
    ASSERT_TRUE(ledger.reserve(MemoryCategory::parameters, share).ok());
    MPI_Barrier(MPI_COMM_WORLD);
    const Status refused = ledger.reserve(MemoryCategory::stash, share);
    EXPECT_EQ(refused.code(), StatusCode::out_of_memory) << refused.message();
    EXPECT_NE(refused.message().find("the node's budget is " + format_bytes(budget) + " (" +
                                     format_bytes(kAvailable) + " available at the start by " +
                                     "MemAvailable + SwapFree in " + files.meminfo + ", less "),
              std::string::npos)
        << refused.message();
    EXPECT_NE(refused.message().find("its " + std::to_string(size) + " ranks hold"),
              std::string::npos)
        << refused.message();
    MPI_Barrier(MPI_COMM_WORLD);

    // The check before building sums the node's ranks: each alone would fit, not together.
    BlockMemory mine;
    mine.parameters = 1000;
    mine.bytes = 8192;  // beside the shares held, fits on one rank, not on all of them
    mine.holds = "parameters";
    ledger.release(MemoryCategory::parameters, share);
    MPI_Barrier(MPI_COMM_WORLD);
    BlockMemory big = mine;
    big.bytes = budget / static_cast<std::size_t>(size) + 1;
    EXPECT_TRUE(check_blocks_fit_node(big, "one rank's").ok());
    const Status together = check_ranks_fit_node(MPI_COMM_WORLD, big);
    EXPECT_EQ(together.code(), StatusCode::out_of_memory) << together.message();
    EXPECT_NE(together.message().find("for the parameters of the stages of this node's " +
                                      std::to_string(size) + " ranks (" +
                                      std::to_string(1000 * size) + " parameters)"),
              std::string::npos)
        << together.message();
    EXPECT_TRUE(check_ranks_fit_node(MPI_COMM_WORLD, mine).ok());
    MPI_Barrier(MPI_COMM_WORLD);

    // Before planning: one copy of the model must fit what the job's one node has left, and
    // each rank may plan to hold its share of that.
    const std::size_t left = *ledger.node_headroom();
    const auto planning_share = node_memory_share(MPI_COMM_WORLD);
    ASSERT_TRUE(planning_share.ok()) << planning_share.status().message();
    EXPECT_EQ(*planning_share, std::optional<std::size_t>(left / static_cast<std::size_t>(size)));
    EXPECT_EQ(left, budget - static_cast<std::size_t>(size) * held_before);
    BlockMemory model = mine;
    model.bytes = left;
    EXPECT_TRUE(check_job_holds_model(MPI_COMM_WORLD, model).ok());
    model.bytes = left + 1;
    const Status too_big = check_job_holds_model(MPI_COMM_WORLD, model);
    EXPECT_EQ(too_big.code(), StatusCode::out_of_memory);
    EXPECT_EQ(too_big.message(),
              "the model needs " + format_bytes(left + 1) + " for its parameters (1000 " +
                  "parameters), more than the " + format_bytes(left) +
                  " the job's node has for them (this node's budget: " + format_bytes(budget) +
                  ", " + format_bytes(kAvailable) + " available at the start by MemAvailable + " +
                  "SwapFree in " + files.meminfo + ", less " + format_bytes(kAvailable - budget) +
                  " for what the ranks hold beside tensors): run it on more nodes, or make it "
                  "smaller");
    MPI_Barrier(MPI_COMM_WORLD);
  }
  // Without a budget on some rank nothing is known, and nothing refused.
  BlockMemory huge;
  huge.bytes = std::size_t{1} << 60;
  EXPECT_TRUE(check_job_holds_model(MPI_COMM_WORLD, huge).ok());
  const auto no_share = node_memory_share(MPI_COMM_WORLD);
  ASSERT_TRUE(no_share.ok()) << no_share.status().message();
  EXPECT_FALSE(no_share->has_value());
  EXPECT_FALSE(ledger.has_node_budget()) << "the scope takes its budget back out";
  if (rank == 0) std::filesystem::remove_all(std::filesystem::path(files.meminfo).parent_path());
}

}  // namespace
}  // namespace spw
