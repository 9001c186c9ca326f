// The objects behind the C ABI's opaque handles.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/capi/job_draft.hpp"
#include "runtime/job_config.hpp"
#include "runtime/node_memory_budget.hpp"
#include "runtime/pipeline_job.hpp"

struct spw_session_s {
  MPI_Comm comm = MPI_COMM_NULL;  // the caller's communicator, duplicated
  int rank = 0;
  int size = 1;
  int live_trainers = 0;  // the session cannot be freed while they run on its communicator
  // The node's memory shared by the ranks of each node (none where another session of the
  // process set it first, or the node's figures cannot be read).
  std::unique_ptr<spw::NodeMemoryBudgetScope> node_budget;
};

struct spw_job_s {
  spw::capi::JobDraft draft;
};

struct spw_trainer_s {
  spw_session_s* session = nullptr;
  spw::JobConfig job;
  spw::PipelineJob pipeline;
  double items_per_step = 0;  // tokens (gpt) or samples (mlp) per step
  std::vector<double> losses;
  std::vector<double> step_seconds;
  int stop_signal = 0;  // the stop request that ended the latest spw_trainer_train, or 0
  // Set by the first failed collective call: the executor may be mid-step, so nothing but
  // spw_trainer_free may touch it again.
  std::string failure;
};
