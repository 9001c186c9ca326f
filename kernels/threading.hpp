// Compute threads of a rank: how many, where they run, and the same count for BLIS.
#pragma once

#include <string>
#include <vector>

#include "blas_kernels.hpp"
#include "status.hpp"

namespace spw {

struct ThreadSetup {
  int threads = 1;
  // Who decided the binding: "OMP_PROC_BIND/OMP_PLACES" (the user's), "hwloc" (ours), or
  // "none" (not bound: fewer cores than threads on this rank, or binding unsupported).
  std::string binding;
  // The OS index of the PU each OpenMP thread runs on after setup (-1 if unknown).
  std::vector<int> pu_of_thread;
  // The PUs (OS indices) this rank may run on: under "hwloc" its share of the cores the
  // launcher bound the process to, under OMP_PLACES every place, else the launch binding.
  // Empty when hwloc cannot read the binding.
  std::vector<int> rank_pus;
  // The PUs its OpenMP threads may run on: the cores they are bound to, their places, or
  // all of rank_pus when they float. Other work (the offload engine) avoids these.
  std::vector<int> compute_pus;
  // The BLIS kernels the rank runs, and who chose them.
  blas::KernelChoice blas;
};

struct ThreadRequest {
  int threads = 0;        // 0: OMP_NUM_THREADS or the OpenMP default
  int local_rank = 0;     // this rank's index among the ranks on its node
  int local_ranks = 1;    // how many ranks share the node (they split its cores)
  bool bind = true;       // bind threads to cores when the user has not
};

// Sets the OpenMP thread count, binds the threads (unless OMP_PROC_BIND / OMP_PLACES already
// say how), chooses BLIS's kernels (blas::choose_kernels) and gives BLIS the same count. Call
// once per rank before compute.
Result<ThreadSetup> setup_threads(const ThreadRequest& request);

// Threads each compute call uses (what setup_threads chose, else OpenMP's maximum).
int compute_threads();

}  // namespace spw
