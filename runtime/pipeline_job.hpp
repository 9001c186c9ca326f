// Opening a pipeline job: everything between a checked job and an executor ready to step
// (the layout, the automatic plan, the rank order it asks for, threads). `spillway train`
// and the C ABI both open jobs here, so the two cannot arrive at different layouts.
#pragma once

#include <mpi.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/status.hpp"
#include "kernels/threading.hpp"
#include "runtime/job_config.hpp"
#include "runtime/output_lock.hpp"
#include "runtime/pipeline_executor.hpp"
#include "runtime/pipeline_layout.hpp"

namespace spw {

// A communicator the job created (the ranks in plan order), freed when the job ends.
class OwnedComm {
 public:
  OwnedComm() = default;
  explicit OwnedComm(MPI_Comm comm) : comm_(comm) {}
  OwnedComm(OwnedComm&& other) noexcept : comm_(other.comm_) { other.comm_ = MPI_COMM_NULL; }
  OwnedComm& operator=(OwnedComm&& other) noexcept;
  OwnedComm(const OwnedComm&) = delete;
  OwnedComm& operator=(const OwnedComm&) = delete;
  ~OwnedComm();
  MPI_Comm get() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

struct PipelineJobOptions {
  // Record trace events for steps 2-4 when the job's output.trace asks for them.
  bool trace = false;
  // Rank 0 creates output.dir even when the planner does not need it (the CLI writes its
  // report there; the C ABI writes nothing unless the planner caches its measurements).
  bool create_output_dir = true;
  // Rank 0 holds output.dir's lock for the job's life (runtime/output_lock.hpp): spillway
  // train's runs, not evaluations or samples.
  bool lock_output_dir = false;
  // A checkpoint to continue from (load_pipeline_checkpoint); empty: a fresh start.
  std::string resume_from;
  // When the job forces its layout: measure as stages = "auto" does and let the planner's
  // cost model predict that layout, so the run can set the prediction beside what it
  // measures (PipelineJob::plan_record). Costs a profile and a link measurement.
  bool predict = false;
  // Forwards only (spillway evaluate and sample): the executor holds parameters but no
  // gradients or optimizer state (TrainSettings::inference_only). Where the planner lays
  // the job out, it counts what forwards hold (parameters, stashes) and orders the layouts
  // that fit by training's times.
  bool inference_only = false;
};

struct PipelineJob {
  // Declared before the executor so it outlives it: the executor runs on this communicator
  // when the planner reordered the ranks.
  OwnedComm plan_order;
  MPI_Comm world = MPI_COMM_NULL;  // what the executor runs on: plan_order or the caller's
  int rank = 0;                    // this rank in `world`
  PipelineSettings settings;       // settings.layout is the layout that runs
  ThreadSetup threads;
  bool planned = false;            // the planner chose the layout
  std::string plan_explanation;    // its reasons, when planned
  // A resumed run's plan: the plan.json it kept (runtime/stored_plan.hpp), or why the one
  // there was not kept and the planner planned anew; both empty otherwise.
  std::string plan_kept_from, plan_not_kept;
  // The plan (runtime/plan_record.hpp) when planned or predicted, else null; every rank.
  nlohmann::json plan_record;
  std::unique_ptr<PipelineExecutor> executor;
  OutputDirLock output_lock;  // rank 0's, with PipelineJobOptions::lock_output_dir
};

// open_pipeline_job as spillway evaluate and sample open `job`: built for forwards
// (PipelineJobOptions::inference_only), without offload, since forwards keep no stash for a
// backward (the tier would only hold memory, a peer tier lending it under the cap), and
// without an output directory, so that planning writes no plan.json or profile.json over
// those of the run that made the checkpoint. Errors as open_pipeline_job.
Result<PipelineJob> open_forwards_only_job(JobConfig job, MPI_Comm comm);

// After a failure only this rank saw (FailureScope::this_rank), drops the executor without
// tearing it down: its collective frees (the peer tier's MPI_Win_free) would wait forever
// for peers blocked on this rank mid-pass. The caller ends the job, which frees it all.
void abandon_executor(PipelineJob& job);

// Collective over `comm`: load_job_file on every rank, agreed: a file every rank reads alike
// fails alike, but a node may lack it, so every rank returns the first failing rank's error.
Result<JobConfig> load_job_on_ranks(const std::string& path,
                                    const std::vector<std::string>& overrides, MPI_Comm comm);

// The layout `job` asks for on `world_size` ranks before any planning: stages = "auto"
// means one stage per pipeline rank here. Every error is invalid_argument naming the keys.
Result<PipelineLayout> requested_layout(const JobConfig& job, int world_size);

// Collective over `comm`. Sets this rank's threads (threads.count split among the ranks of
// a node), lets the planner choose the layout when parallel.stages = "auto", creates the
// executor (with the job's [offload]) and loads options.resume_from. Every error is agreed:
// all ranks return the same one and nothing is left to free.
Result<PipelineJob> open_pipeline_job(const JobConfig& job, MPI_Comm comm,
                                      const PipelineJobOptions& options);

}  // namespace spw
