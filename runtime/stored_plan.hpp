// A planned run's plan.json read back instead of profiling the model and planning again
// (seconds for gpt-s, minutes where a large head dominates):
// - spillway evaluate and sample on several ranks with parallel.stages = "auto" take the
//   layout of the run that made the checkpoint when it was planned for the same model, rank
//   count and batch. A plan made for training fits forwards: they hold the same parameters
//   and less besides (no gradients, optimizer state, backward buffers or stash).
// - A resumed run (spillway train --resume, a requeued batch job) keeps the plan it was
//   started with when the job's planning keys are what they were: the same layout as before
//   the stop, without measuring again on every requeue.
#pragma once

#include <mpi.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "kernels/status.hpp"
#include "runtime/auto_plan.hpp"
#include "runtime/job_config.hpp"

namespace spw {

// What a plan depends on, as plan.json keeps it ("planned_for"): [model], train.batch,
// train.microbatches and train.optimizer (its state's bytes), [parallel], [offload], [memory]
// and [threads], in the job file's spellings (to_json).
nlohmann::json planning_keys(const JobConfig& job);

struct KeptPlan {
  std::optional<AutoPlan> plan;  // the stored plan, when it is still the job's
  std::string path;              // the plan.json looked for; empty unless stages = "auto"
  std::string not_kept;          // why a plan.json there was not kept; empty if there was none
};

// Collective over `comm`. For a job with parallel.stages = "auto" (a resumed one): rank 0
// reads output.dir/plan.json and every rank gets its plan when the file's planned_for equals
// planning_keys(job) and it was made for as many ranks, and, where the job sets no
// memory.cap, its highest predicted peak fits each rank's share of its node's memory now
// (node_memory_share). A missing or changed plan is no error (not_kept says why), only a
// failed broadcast is.
Result<KeptPlan> plan_to_resume_with(const JobConfig& job, MPI_Comm comm);

// `job` with the layout of `record` (a plan.json) given: parallel.stages as the plan's block
// ranges, its schedule, replicas, chunks and layout, its layer cuts and head chunks, and
// train.microbatches as it split the batch; offload.tier = "auto" becomes "none" (forwards
// offload nothing). An invalid_argument error names why the plan does not fit the job on
// `world_size` ranks: another model, rank count or batch, or a record spillway cannot read.
// Local, no MPI.
Result<JobConfig> job_with_plan(const JobConfig& job, const nlohmann::json& record, int world_size);

struct StoredPlanUse {
  JobConfig job;         // with the stored plan's layout given, or as it was
  std::string path;      // the plan.json looked for; empty unless stages = "auto"
  bool used = false;     // job has the plan's layout
  std::string not_used;  // why a plan.json at path was not used; empty if there was none
};

// Collective over `comm`. For a job with parallel.stages = "auto" and an output.dir, rank 0
// reads output.dir/plan.json and every rank gets job_with_plan's answer; a missing or
// unfitting file is no error (not_used says why), only a failed broadcast is.
Result<StoredPlanUse> use_stored_plan(const JobConfig& job, MPI_Comm comm);

// Where the running layout came from, to follow its description in a line to the user:
// ", the plan in PATH", ", planned (PATH not used: WHY)", ", planned" where no plan.json was
// there, or nothing for stages the job gave. `planned`: the planner chose the layout just now
// (PipelineJob::planned).
std::string layout_source(const StoredPlanUse& stored, bool planned);

}  // namespace spw
