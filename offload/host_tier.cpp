#include "offload/host_tier.hpp"

#include <cstring>
#include <utility>

namespace spw::offload {

Result<int> host_tier_node(const Topology& topology, int working_node) {
  const std::optional<int> node = topology.capacity_node_for(working_node);
  if (!node)
    return error(StatusCode::unsupported,
                 "offload.tier = \"host\" needs a second memory node (another NUMA node, HBM or "
                 "NVM), but this node has one: use offload.tier = \"file\" or \"peer\"");
  return *node;
}

Result<std::unique_ptr<HostTier>> HostTier::create(int working_node) {
  SPW_ASSIGN_OR_RETURN(const Topology* topology, Topology::process());
  if (working_node < 0) working_node = topology->numa_node_of_calling_thread().value_or(0);
  SPW_ASSIGN_OR_RETURN(const int node, host_tier_node(*topology, working_node));
  return std::unique_ptr<HostTier>(new HostTier(node));
}

Status HostTier::store(std::uint64_t id, const std::vector<Region>& regions) {
  drop(id);
  // No first touch: the engine thread must not start an OpenMP team, and the pages land on
  // the bound node when the copy below touches them.
  auto block = allocate(total_bytes(regions), MemoryCategory::stash,
                        MemoryPlacement::on_node(node_), FirstTouch::none, ledger_);
  if (!block.ok())
    return block.status().with_context("host tier on NUMA node " + std::to_string(node_));
  {
    std::lock_guard lock(note_mutex_);
    last_note_ = (*block)->binding_note();
  }
  auto* target = static_cast<unsigned char*>((*block)->data());
  for (const Region& region : regions) {
    if (region.bytes > 0) std::memcpy(target, region.data, region.bytes);
    target += region.bytes;
  }
  stashes_[id] = std::move(block).value();
  return Status::success();
}

Status HostTier::load(std::uint64_t id, const std::vector<Region>& regions) {
  auto it = stashes_.find(id);
  if (it == stashes_.end())
    return error(StatusCode::internal, "host tier holds no stash " + std::to_string(id));
  if (total_bytes(regions) != it->second->bytes())
    return error(StatusCode::invalid_argument,
                 "stash " + std::to_string(id) + " was stored with " +
                     std::to_string(it->second->bytes()) + " bytes, asked back into " +
                     std::to_string(total_bytes(regions)));
  const auto* source = static_cast<const unsigned char*>(it->second->data());
  for (const Region& region : regions) {
    if (region.bytes > 0) std::memcpy(region.data, source, region.bytes);
    source += region.bytes;
  }
  return Status::success();
}

void HostTier::drop(std::uint64_t id) { stashes_.erase(id); }

std::string HostTier::binding_note() const {
  std::lock_guard lock(note_mutex_);
  return last_note_;
}

Result<std::unique_ptr<Tier>> make_host_tier(int working_node) {
  SPW_ASSIGN_OR_RETURN(auto tier, HostTier::create(working_node));
  return std::unique_ptr<Tier>(std::move(tier));
}

}  // namespace spw::offload
