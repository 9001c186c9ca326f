// spillway evaluate and sample on several ranks with parallel.stages = "auto": the layout the
// run that made the checkpoint was planned to, read back from the plan.json it left in
// output.dir, instead of profiling the model and planning again (several seconds for gpt-s,
// half a minute and more where a large head dominates). A plan made for training fits
// forwards: they hold the same parameters and less besides (no gradients, optimizer state,
// backward buffers or stash kept for a backward).
#pragma once

#include <mpi.h>

#include <nlohmann/json.hpp>
#include <string>

#include "kernels/status.hpp"
#include "runtime/job_config.hpp"

namespace spw {

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
