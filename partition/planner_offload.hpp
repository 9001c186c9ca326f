// What an offload tier costs a layout, as the executor sets the tier up (see setup_offload
// in runtime/pipeline_executor.cpp): the seconds to copy one stash out and back, per stage,
// and the bytes the tier holds on each rank for the whole run. The planner adds both to the
// simulation of a schedule that went through the offload pass (offload_pass.hpp).
//
//   file  copies at OffloadBandwidth::file_bytes_per_s each way; every rank holds a staging
//         buffer: its largest stash rounded up to 64 KiB, within [64 KiB, 4 MiB].
//   peer  copies over the link to the partner rank (out: rank -> partner, back: partner ->
//         rank). The partner of list k in a pipeline of n lists is its mirror n - 1 - k in
//         the same replica; where k is its own mirror (one list, or the middle of an odd
//         number), list k of the next replica, and without replicas there is none, so the
//         tier cannot be used. Under PipeFB a backward rank borrows from its stage's forward
//         rank and forward ranks, which keep no stash, borrow nothing. The partner lends a
//         window of max live stashes x (largest stash + 4 KiB), rounded up to 64 bytes, to
//         each rank borrowing from it, for the whole run.
//   host  needs a second memory node; RankTopology does not say whether there is one, so it
//         is not modelled (check_offload refuses it).
// Link contention between the tier's copies and the pipeline's own transfers is not
// modelled: each is priced as if it had its link to itself.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/status.hpp"
#include "partition/planner_cost.hpp"
#include "partition/rank_topology.hpp"
#include "partition/simulator.hpp"

namespace spw::sched {

inline constexpr std::int64_t kPeerSlackBytes = 4096;                     // per stash
inline constexpr std::int64_t kFileStagingMinBytes = std::int64_t{1} << 16;
inline constexpr std::int64_t kFileStagingMaxBytes = std::int64_t{4} << 20;

// The position (replica * ranks_in_pipeline() + list) of the rank lending peer memory to
// list `list` of `replica`, or -1 for none.
int peer_partner(const PipelineLayout& layout, int replica, int list);

// invalid_argument unless the file bandwidth is a positive finite number.
Status check_offload_bandwidth(const OffloadBandwidth& bandwidth);

// invalid_argument when layout.offload cannot be run: a negative keep or lookahead, the
// host tier, or the peer tier with a rank that offloads but has no partner.
Status check_offload(const PipelineLayout& layout);

// Sets offload_s and prefetch_s of every stage in one replica's cost model: the copies of
// the rank running the stage's backwards, where its stashes live. Nothing for tier none.
void add_offload_costs(CostModel& costs, const RankTopology& topology,
                       const PipelineLayout& layout, int replica,
                       const OffloadBandwidth& bandwidth);

// [list] the bytes the tier holds on each rank of a pipeline for the whole run (the same in
// every replica): the file tier's staging buffer, the peer windows a rank lends.
// `max_live_stashes` is the validator's per list, as the executor sizes peer windows with.
std::vector<std::int64_t> offload_reserved_bytes(const PipelineLayout& layout,
                                                 const std::vector<StageCost>& stages,
                                                 const std::vector<int>& max_live_stashes);

// The busiest rank's offload stream: seconds spent copying per iteration.
double offload_stream_s(const Simulation& simulation);

}  // namespace spw::sched
