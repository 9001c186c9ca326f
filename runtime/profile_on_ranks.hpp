// Profiling the way training loads the node: every rank of a job profiles every block at
// the same time, with the threads it will train with, and rank 0 keeps per block and pass
// the median over the ranks. Profiling on rank 0 alone while the others wait measures an
// idle node (and, on a shared one, whatever else runs), not one where every rank computes.
#pragma once

#include <mpi.h>

#include "kernels/status.hpp"
#include "partition/profile.hpp"
#include "runtime/profiler.hpp"

namespace spw {

// Collective over `comm`. Rank 0 returns the median profile; every other rank its own.
// A failure on any rank is agreed: every rank returns it.
Result<sched::ModelProfile> profile_on_all_ranks(const TrainSettings& settings,
                                                 const ProfileOptions& options, MPI_Comm comm);

}  // namespace spw
