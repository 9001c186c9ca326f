#include "runtime/node_memory_budget.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/memory_ledger.hpp"
#include "runtime/mpi_support.hpp"

namespace spw {

std::size_t node_memory_budget_bytes(std::size_t available, int local_ranks) {
  const std::size_t reserve =
      available / 16 + static_cast<std::size_t>(local_ranks) * (std::size_t{256} << 20);
  return available > reserve ? available - reserve : 0;
}

std::optional<std::size_t> planned_node_share(const sched::RankTopology& topology,
                                              const std::vector<std::size_t>& node_memory) {
  std::optional<std::size_t> least;
  for (int rank = 0; rank < topology.ranks; ++rank) {
    const auto node = static_cast<std::size_t>(topology.node_of[static_cast<std::size_t>(rank)]);
    if (node >= node_memory.size() || node_memory[node] == 0) return std::nullopt;
    const int ranks = topology.ranks_on_node(static_cast<int>(node));
    const std::size_t share =
        node_memory_budget_bytes(node_memory[node], ranks) / static_cast<std::size_t>(ranks);
    least = std::min(least.value_or(share), share);
  }
  return least;
}

BlockMemory block_memory(const ModelSpec& model, std::int64_t first, std::int64_t last,
                         bool gradients, const OptimizerSettings* optimizer) {
  int copies = 1 + (gradients ? 1 : 0);
  if (optimizer != nullptr) {
    copies += optimizer->kind == "adamw" ? 2 : optimizer->momentum != 0 ? 1 : 0;
  }
  BlockMemory out;
  out.parameters = static_cast<std::size_t>(model.parameter_count(first, last));
  out.bytes = out.parameters * sizeof(float) * static_cast<std::size_t>(copies);
  out.holds = optimizer != nullptr ? "parameters, gradients and optimizer state"
              : gradients          ? "parameters and gradients"
                                   : "parameters";
  return out;
}

Status check_blocks_fit_node(const BlockMemory& blocks, const std::string& whose) {
  return MemoryLedger::process().check_node_headroom(
      blocks.bytes, format_bytes(blocks.bytes) + " for the " + blocks.holds + " of " + whose +
                        " (" + std::to_string(blocks.parameters) + " parameters)");
}

Status check_ranks_fit_node(MPI_Comm comm, const BlockMemory& mine) {
  MPI_Comm node = MPI_COMM_NULL;
  SPW_TRY(mpi_check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
                    "grouping the ranks by node"));
  unsigned long long sums[2] = {mine.bytes, mine.parameters};
  const int rc = MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_UNSIGNED_LONG_LONG, MPI_SUM, node);
  int ranks = 1;
  MPI_Comm_size(node, &ranks);
  MPI_Comm_free(&node);
  SPW_TRY(mpi_check(rc, "summing the node's parameter memory"));
  BlockMemory together = mine;
  together.bytes = static_cast<std::size_t>(sums[0]);
  together.parameters = static_cast<std::size_t>(sums[1]);
  // Parameters are not all trained on every rank (PipeFB's forward copies), so the words
  // say what the largest holder keeps.
  return check_blocks_fit_node(
      together, ranks == 1 ? std::string("this rank's stages")
                           : "the stages of this node's " + std::to_string(ranks) + " ranks");
}

namespace {

// What the job's nodes' budgets leave, gathered in one place for the two checks below.
struct JobBudgets {
  bool known = false;               // every rank has a budget
  unsigned long long headroom = 0;  // summed over the nodes, each counted by its first rank
  unsigned long long nodes = 0;
  unsigned long long least_share = 0;  // the smallest headroom / ranks over the nodes
};

Result<JobBudgets> job_budgets(MPI_Comm comm) {
  SPW_ASSIGN_OR_RETURN(const NodeShare node, node_share(comm));
  const std::optional<std::size_t> headroom = MemoryLedger::process().node_headroom();
  const bool first = node.local_rank == 0;
  unsigned long long sums[2] = {first ? headroom.value_or(0) : 0, first ? 1ull : 0ull};
  // A rank without a budget offers no limit to the minimum, and its 0 in the second entry
  // says it has none.
  unsigned long long least[2] = {
      headroom ? *headroom / static_cast<std::size_t>(node.local_ranks) : ~0ull,
      headroom ? 1ull : 0ull};
  SPW_TRY(mpi_check(MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_UNSIGNED_LONG_LONG, MPI_SUM, comm),
                    "summing the nodes' memory budgets"));
  SPW_TRY(mpi_check(MPI_Allreduce(MPI_IN_PLACE, least, 2, MPI_UNSIGNED_LONG_LONG, MPI_MIN, comm),
                    "agreeing on each rank's share of its node's memory"));
  return JobBudgets{least[1] == 1, sums[0], sums[1], least[0]};
}

}  // namespace

Status check_job_holds_model(MPI_Comm comm, const BlockMemory& model) {
  SPW_ASSIGN_OR_RETURN(const JobBudgets budgets, job_budgets(comm));
  if (!budgets.known || model.bytes <= budgets.headroom) return Status::success();
  const std::string nodes = budgets.nodes == 1
                                ? "the job's node has"
                                : "the job's " + std::to_string(budgets.nodes) + " nodes have";
  return error(StatusCode::out_of_memory,
               "the model needs " + format_bytes(model.bytes) + " for its " + model.holds + " (" +
                   std::to_string(model.parameters) + " parameters), more than the " +
                   format_bytes(static_cast<std::size_t>(budgets.headroom)) + " " + nodes +
                   " for them (this node's budget: " + MemoryLedger::process().node_budget_text() +
                   "): run it on more nodes, or make it smaller");
}

Result<std::optional<std::size_t>> node_memory_share(MPI_Comm comm) {
  SPW_ASSIGN_OR_RETURN(const JobBudgets budgets, job_budgets(comm));
  if (!budgets.known) return std::optional<std::size_t>();
  return std::optional<std::size_t>(static_cast<std::size_t>(budgets.least_share));
}

Result<std::unique_ptr<NodeMemoryBudgetScope>> NodeMemoryBudgetScope::install(
    MPI_Comm comm, const MemoryFactFiles& files) {
  auto scope = std::unique_ptr<NodeMemoryBudgetScope>(new NodeMemoryBudgetScope());
  // Every rank must take the same branches below, so the one local fact (a budget set
  // already) is agreed on first.
  int has_budget = MemoryLedger::process().has_node_budget() ? 1 : 0;
  SPW_TRY(mpi_check(MPI_Allreduce(MPI_IN_PLACE, &has_budget, 1, MPI_INT, MPI_MAX, comm),
                    "agreeing on a node memory budget"));
  if (has_budget != 0) return scope;

  SPW_TRY(
      mpi_check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &scope->node_),
                "grouping the ranks by node"));
  MPI_Comm_set_errhandler(scope->node_, MPI_ERRORS_RETURN);
  int local_rank = 0;
  int local_ranks = 1;
  MPI_Comm_rank(scope->node_, &local_rank);
  MPI_Comm_size(scope->node_, &local_ranks);

  // The node's first rank reads the figure once, before any rank of the job allocates.
  std::string source;
  std::uint64_t bytes = 0;
  if (local_rank == 0) {
    if (const auto available = available_memory(files)) {
      bytes = node_memory_budget_bytes(available->bytes, local_ranks);
      source = format_bytes(available->bytes) + " available at the start by " + available->source +
               ", less " + format_bytes(available->bytes - bytes) + " for what " +
               (local_ranks == 1 ? "the rank holds" : "the ranks hold") + " beside tensors";
    }
  }
  SPW_TRY(mpi_check(MPI_Bcast(&bytes, 1, MPI_UINT64_T, 0, scope->node_),
                    "sharing the node's available memory"));
  if (bytes == 0) return scope;
  SPW_TRY(broadcast_string(scope->node_, source, "sharing where the node's memory figure is from"));

  // The counter lives on the node's first rank; the others reach it through shared memory.
  std::uint64_t* counter = nullptr;
  SPW_TRY(mpi_check(
      MPI_Win_allocate_shared(local_rank == 0 ? sizeof(std::uint64_t) : 0, sizeof(std::uint64_t),
                              MPI_INFO_NULL, scope->node_, &counter, &scope->window_),
      "allocating the node's shared memory counter"));
  MPI_Aint size = 0;
  int unit = 0;
  SPW_TRY(mpi_check(MPI_Win_shared_query(scope->window_, 0, &size, &unit, &counter),
                    "finding the node's shared memory counter"));
  if (local_rank == 0) *counter = 0;
  SPW_TRY(mpi_check(MPI_Barrier(scope->node_), "starting the node's memory counter"));

  NodeMemoryBudget budget;
  budget.bytes = static_cast<std::size_t>(bytes);
  budget.source = source;
  budget.ranks = local_ranks;
  budget.shared_in_use = counter;
  SPW_TRY(MemoryLedger::process().set_node_budget(std::move(budget)));
  // A local step that no rank is known to fail; one that did would keep its budget without
  // the guard at MPI_Finalize rather than leave the node's ranks in different states.
  const int keyval = finalize_keyval();
  scope->noted_for_finalize_ = keyval != MPI_KEYVAL_INVALID &&
                               MPI_Comm_set_attr(MPI_COMM_SELF, keyval, nullptr) == MPI_SUCCESS;
  return scope;
}

// The attribute on MPI_COMM_SELF whose deletion, at the start of MPI_Finalize or in the
// scope's destructor, takes the budget out of the ledger.
int NodeMemoryBudgetScope::finalize_keyval() {
  static const int keyval = [] {
    int created = MPI_KEYVAL_INVALID;
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &leave_ledger, &created, nullptr);
    return created;
  }();
  return keyval;
}

int NodeMemoryBudgetScope::leave_ledger(MPI_Comm, int, void*, void*) {
  (void)MemoryLedger::process().set_node_budget(std::nullopt);
  return MPI_SUCCESS;
}

NodeMemoryBudgetScope::~NodeMemoryBudgetScope() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized != 0) return;
  if (window_ != MPI_WIN_NULL) {
    if (noted_for_finalize_) MPI_Comm_delete_attr(MPI_COMM_SELF, finalize_keyval());
    (void)MemoryLedger::process().set_node_budget(std::nullopt);
    MPI_Win_free(&window_);
  }
  if (node_ != MPI_COMM_NULL) MPI_Comm_free(&node_);
}

}  // namespace spw
