// The host tier: stashes in memory on another NUMA node or of another memory kind (DRAM or
// NVM behind HBM), used as capacity while the rank's own node is its working memory. A node
// with a single memory node has no such tier.
//
// Its bytes are accounted in a ledger of its own, not the rank's: the rank's cap guards its
// working memory, which is what offloading relieves.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "kernels/memory_ledger.hpp"
#include "kernels/numa_allocator.hpp"
#include "kernels/status.hpp"
#include "kernels/topology.hpp"
#include "offload/tier.hpp"

namespace spw::offload {

// The node (logical index) stashes of `working_node` go to: Topology::capacity_node_for.
// unsupported with one memory node, suggesting the file or peer tier.
Result<int> host_tier_node(const Topology& topology, int working_node);

class HostTier final : public Tier {
 public:
  // working_node < 0: the node of the calling thread's binding, else node 0. Uses this
  // process's topology (Topology::process()).
  static Result<std::unique_ptr<HostTier>> create(int working_node = -1);

  const char* name() const override { return "host"; }
  Status store(std::uint64_t id, const std::vector<Region>& regions) override;
  Status load(std::uint64_t id, const std::vector<Region>& regions) override;
  void drop(std::uint64_t id) override;

  int node() const { return node_; }
  const MemoryLedger& ledger() const { return ledger_; }  // category stash
  // Why the last stash is not bound to node(), when the OS refused the binding; else "".
  std::string binding_note() const;

 private:
  explicit HostTier(int node) : node_(node) {}

  int node_;
  MemoryLedger ledger_;  // before stashes_: their allocations give bytes back to it
  std::unordered_map<std::uint64_t, std::unique_ptr<Allocation>> stashes_;
  mutable std::mutex note_mutex_;  // the note is read from outside the engine thread
  std::string last_note_;
};

Result<std::unique_ptr<Tier>> make_host_tier(int working_node = -1);

}  // namespace spw::offload
