// Small pieces every MPI-using part of the runtime shares: turning MPI return codes into a
// Status, agreeing on success across ranks, and who shares a node.
//
// Communicators the runtime creates get MPI_ERRORS_RETURN, so a failed MPI call comes back
// as a Status with the MPI error string instead of MPI aborting the job from inside the
// library; the driver decides what a failure means.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/status.hpp"

namespace spw {

// communication error "WHAT: <MPI's error string>" unless rc is MPI_SUCCESS.
Status mpi_check(int rc, const char* what);

// Collective over `comm`: success when `local` is a success on every rank, else the same
// error on every rank: the message of the lowest failing rank, prefixed with "rank N: "
// unless every rank failed (then they failed alike, typically on the same bad input).
Status agree_on_status(MPI_Comm comm, const Status& local);

// The smallest message a bandwidth probe sends. A smaller one's transfer time is within the
// timer's noise of the latency, and the bandwidth derived from their difference varied
// 50-fold between identical runs. The link model (latency + bytes / bandwidth) still prices
// small messages right, since their cost is then mostly the latency.
inline constexpr std::int64_t kLinkProbeMinimumBytes = std::int64_t{1} << 20;

// Best of `reps` round trips of `bytes` with `peer` (which must call this too, with
// `starts` the other way round), halved: the one-way time of one message.
Result<double> ping_pong_seconds(MPI_Comm comm, int peer, bool starts, std::int64_t bytes,
                                 int reps);

// Collective over `comm`: every rank's `mine` on rank 0, in rank order (empty elsewhere).
Result<std::vector<std::string>> gather_strings(MPI_Comm comm, const std::string& mine);

// Collective over `comm`: rank 0's `text` on every rank. `what` names it in an error.
Status broadcast_string(MPI_Comm comm, std::string& text, const char* what);

struct NodeShare {
  int local_rank = 0;   // this rank's index among the ranks on its node
  int local_ranks = 1;  // ranks on this node
};
Result<NodeShare> node_share(MPI_Comm comm);

}  // namespace spw
