// The private slot of PipelineExecutor, shared by the files that define its members
// (pipeline_executor.cpp, pipeline_executor_slots.cpp, pipeline_executor_comm.cpp).
#pragma once

#include <mpi.h>

#include <vector>

#include "runtime/pipeline_executor.hpp"

namespace spw {

// Everything one (chunk, microbatch) keeps between its forward and its weight gradient.
struct PipelineExecutor::Slot {
  Stash acts{MemoryCategory::stash};       // [0] chunk input, [b + 1] output of block b
  Stash grads{MemoryCategory::workspace};  // [0] input gradient, [b + 1] of block b's output
  std::vector<BlockState> states;          // [block]
  std::vector<MPI_Request> sends;
  bool weight_done = false;
  bool grad_sent = false;
  bool stash_sent = false;  // a forward-only chunk's slot is done once its stash has left
  bool dropped = false;     // DropStash: an evaluation's forward, done once its sends are
  // Where the stash is: resident, being copied out (its memory still held), out on the
  // capacity tier (its tensors given back, their places kept), or being copied back.
  enum class Residency {
    resident,
    evicting,
    offloaded,
    prefetching
  } residency = Residency::resident;
  std::vector<StashEntry> offloaded;  // stash tensors given back while out
  double transfer_started = 0;
};

}  // namespace spw
