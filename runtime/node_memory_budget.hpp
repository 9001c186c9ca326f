// The node's memory budget for a whole job: the ranks that share a node share one counter of
// the bytes their ledgers hold (MPI shared memory), against what the node had available
// when the job started (runtime/available_memory.hpp). A model that cannot fit then fails
// with a message naming the node's figure, where without it the kernel's OOM killer (or
// the batch system's cgroup) would end a rank without a word.
#pragma once

#include <mpi.h>

#include <memory>
#include <optional>
#include <vector>

#include "kernels/status.hpp"
#include "partition/rank_topology.hpp"
#include "runtime/available_memory.hpp"
#include "runtime/model.hpp"
#include "runtime/optimizer.hpp"

namespace spw {

// Kept out of the budget: a sixteenth of the node's available memory, and 256 MiB a rank
// (one gpt-s rank held 54 MiB of tensors and 85 MiB resident, 2026-11-30).
std::size_t node_memory_budget_bytes(std::size_t available, int local_ranks);

// What each rank may plan to hold where a plan made without running (spillway plan) has no
// memory.cap, as node_memory_share gives a run: per node, the budget of `node_memory[node]`
// (what it has available) over its ranks, the smallest over the topology's nodes; nullopt
// where a node's figure is unknown (0, or missing).
std::optional<std::size_t> planned_node_share(const sched::RankTopology& topology,
                                              const std::vector<std::size_t>& node_memory);

// What blocks [first, last] of `model` hold for certain once built: their parameters, their
// gradients (when `gradients`) and `optimizer`'s state (null: none).
struct BlockMemory {
  std::size_t parameters = 0;  // elements
  std::size_t bytes = 0;
  std::string holds;  // "parameters, gradients and optimizer state"
};
BlockMemory block_memory(const ModelSpec& model, std::int64_t first, std::int64_t last,
                         bool gradients, const OptimizerSettings* optimizer);

// Checks made before the blocks are built, so that a model too big for the node fails at
// once rather than after it has filled the node's memory (MemoryLedger::check_node_headroom;
// success without a budget). The first for one process; the second collective over `comm`,
// summing `mine` over the ranks that share each node, every rank given the same answer.
Status check_blocks_fit_node(const BlockMemory& blocks, const std::string& whose);
Status check_ranks_fit_node(MPI_Comm comm, const BlockMemory& mine);

// Collective over `comm`, before a planner profiles a model: whether the job's nodes can
// hold one copy of `model` (the whole model's BlockMemory) in what their budgets leave, so
// that a model no layout can fit fails before its blocks are profiled. out_of_memory on
// every rank when not; success when some node has no budget.
Status check_job_holds_model(MPI_Comm comm, const BlockMemory& model);

// Collective over `comm`: what each rank may plan to hold where the job sets no memory.cap,
// the smallest over the job's nodes of what a node's budget leaves over its ranks; nullopt
// when some rank has no budget.
Result<std::optional<std::size_t>> node_memory_share(MPI_Comm comm);

class NodeMemoryBudgetScope {
 public:
  // Collective over `comm`. The node's first rank reads available_memory(files) and every
  // rank of that node gives its process's ledger (MemoryLedger::process()) the budget: that
  // figure less what the ledger does not see (kNodeMemoryReserve), since the processes also
  // hold code, MPI's and BLIS's buffers, and the kernel ends them before the last byte.
  // Returns a scope without a budget where the figure cannot be read or the ledger has one
  // already (another scope's). communication on an MPI failure (no budget set then).
  static Result<std::unique_ptr<NodeMemoryBudgetScope>> install(MPI_Comm comm,
                                                                const MemoryFactFiles& files = {});

  // Collective over the node's ranks when a budget was set: takes it out of the ledger and
  // frees the shared counter. After MPI_Finalize it frees nothing of MPI's: the budget left
  // the ledger as MPI_Finalize began (a delete callback on MPI_COMM_SELF), while the counter
  // was still there, so that a scope outliving MPI never has the ledger touch it.
  ~NodeMemoryBudgetScope();
  NodeMemoryBudgetScope(const NodeMemoryBudgetScope&) = delete;
  NodeMemoryBudgetScope& operator=(const NodeMemoryBudgetScope&) = delete;

  bool active() const { return window_ != MPI_WIN_NULL; }

 private:
  NodeMemoryBudgetScope() = default;
  static int finalize_keyval();
  static int leave_ledger(MPI_Comm, int, void*, void*);
  MPI_Comm node_ = MPI_COMM_NULL;
  MPI_Win window_ = MPI_WIN_NULL;
  bool noted_for_finalize_ = false;  // the MPI_COMM_SELF attribute is set
};

}  // namespace spw
