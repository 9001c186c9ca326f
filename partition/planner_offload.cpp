#include "partition/planner_offload.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace spw::sched {

namespace {

std::size_t index(int i) { return static_cast<std::size_t>(i); }

std::int64_t round_up(std::int64_t bytes, std::int64_t to) { return (bytes + to - 1) / to * to; }

// The stages whose stashes list `list` holds at some point: the ones it serves.
std::int64_t largest_stash(const PipelineLayout& l, const std::vector<StageCost>& stages,
                           int list) {
  std::int64_t largest = 0;
  for (int s = 0; s < static_cast<int>(stages.size()); ++s)
    if (l.forward_list_of(s) == list || l.backward_list_of(s) == list)
      largest = std::max(largest, stages[index(s)].stash_bytes);
  return largest;
}

double copy_s(const Link& link, std::int64_t bytes) {
  return link.latency_s + static_cast<double>(bytes) / link.bandwidth_bytes_per_s;
}

}  // namespace

Status check_offload_bandwidth(const OffloadBandwidth& bandwidth) {
  if (!(bandwidth.file_bytes_per_s > 0) || std::isinf(bandwidth.file_bytes_per_s))
    return error(StatusCode::invalid_argument,
                 "offload: the file tier's bandwidth = " +
                     std::to_string(bandwidth.file_bytes_per_s) +
                     " bytes/s must be a positive finite number");
  return Status::success();
}

int peer_partner(const PipelineLayout& l, int replica, int list) {
  const int n = l.ranks_in_pipeline();
  if (l.ranks_per_stage() == 2)
    return list >= l.pipeline_ranks ? replica * n + list - l.pipeline_ranks : -1;
  const int mirror = n - 1 - list;
  if (mirror != list) return replica * n + mirror;
  if (l.replicas > 1) return ((replica + 1) % l.replicas) * n + list;
  return -1;
}

Status check_offload(const PipelineLayout& l) {
  const OffloadChoice& o = l.offload;
  if (o.tier == OffloadTier::none) return Status::success();
  if (o.keep < 0 || o.lookahead < 0)
    return error(StatusCode::invalid_argument,
                 "layout: offload keep = " + std::to_string(o.keep) + " and lookahead = " +
                     std::to_string(o.lookahead) + " must be >= 0");
  if (o.tier == OffloadTier::host)
    return error(StatusCode::invalid_argument,
                 "layout: the host offload tier is not modelled (the rank topology does not say "
                 "whether a rank has a second memory node): use file or peer");
  if (o.tier == OffloadTier::peer && l.ranks_per_stage() == 1)
    for (int list = 0; list < l.ranks_in_pipeline(); ++list)
      if (peer_partner(l, 0, list) < 0)
        return error(StatusCode::invalid_argument,
                     "layout: the peer offload tier needs a partner rank for every rank, and "
                     "rank " + std::to_string(list) + " of a pipeline of " +
                         std::to_string(l.ranks_in_pipeline()) +
                         " without replicas has none: use the file tier or another layout");
  return Status::success();
}

void add_offload_costs(CostModel& costs, const RankTopology& topology, const PipelineLayout& l,
                       int replica, const OffloadBandwidth& bandwidth) {
  if (l.offload.tier == OffloadTier::none) return;
  for (int s = 0; s < static_cast<int>(costs.stages.size()); ++s) {
    StageCost& c = costs.stages[index(s)];
    if (l.offload.tier == OffloadTier::file) {
      c.offload_s = c.prefetch_s = static_cast<double>(c.stash_bytes) / bandwidth.file_bytes_per_s;
      continue;
    }
    const int list = l.backward_list_of(s);
    const int partner = peer_partner(l, replica, list);
    if (partner < 0) continue;  // check_offload refuses such a layout
    const int self = l.world_rank_of(replica, list);
    const int other = l.world_rank[index(partner)];
    c.offload_s = copy_s(topology.link(self, other), c.stash_bytes);
    c.prefetch_s = copy_s(topology.link(other, self), c.stash_bytes);
  }
}

std::vector<std::int64_t> offload_reserved_bytes(const PipelineLayout& l,
                                                 const std::vector<StageCost>& stages,
                                                 const std::vector<int>& max_live_stashes) {
  const int n = l.ranks_in_pipeline();
  std::vector<std::int64_t> reserved(index(n), 0);
  if (l.offload.tier == OffloadTier::file) {
    for (int list = 0; list < n; ++list)
      reserved[index(list)] =
          std::clamp(round_up(largest_stash(l, stages, list), kFileStagingMinBytes),
                     kFileStagingMinBytes, kFileStagingMaxBytes);
  } else if (l.offload.tier == OffloadTier::peer) {
    // Every replica lends and borrows alike, so replica 0's lists stand for all.
    for (int list = 0; list < n; ++list) {
      const int partner = peer_partner(l, 0, list);
      if (partner < 0) continue;
      const std::int64_t window =
          max_live_stashes[index(list)] * (largest_stash(l, stages, list) + kPeerSlackBytes);
      reserved[index(partner % n)] += round_up(window, 64);
    }
  }
  return reserved;
}

double offload_stream_s(const Simulation& simulation) {
  double busiest = 0;
  for (const auto& rank : simulation.timeline) {
    double busy = 0;
    for (const TimelineEntry& e : rank)
      if (e.stream == Stream::offload) busy += e.end_s - e.start_s;
    busiest = std::max(busiest, busy);
  }
  return busiest;
}

}  // namespace spw::sched
