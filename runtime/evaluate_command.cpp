#include "runtime/evaluate_command.hpp"

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "kernels/threading.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/checkpoint_model.hpp"
#include "runtime/json_file.hpp"
#include "runtime/mpi_support.hpp"
#include "runtime/pipeline_job.hpp"
#include "runtime/progress.hpp"
#include "runtime/stored_plan.hpp"
#include "runtime/trainer.hpp"

namespace spw {

namespace {

// The single-rank trainer's evaluation: the job needs one rank and one chunk, as in train.
Result<double> evaluate_on_one_rank(const JobConfig& job) {
  SPW_ASSIGN_OR_RETURN(TrainSettings settings, train_settings_from(job));
  settings.evaluates = true;
  settings.inference_only = true;
  ThreadRequest threads;
  threads.threads = job.threads.count;
  SPW_TRY(setup_threads(threads).status());
  SPW_ASSIGN_OR_RETURN(auto trainer, Trainer::create(settings));
  return trainer->evaluate(job.eval.batches);
}

}  // namespace

Status run_evaluate_command(const EvaluateCommand& command, MPI_Comm comm, FailureScope& scope) {
  scope = FailureScope::all_ranks;
  int size = 1, rank = 0;
  MPI_Comm_size(comm, &size);
  MPI_Comm_rank(comm, &rank);
  SPW_ASSIGN_OR_RETURN(JobConfig job,
                       load_job_on_ranks(command.config_path, command.overrides, comm));
  job.train.init_from = command.checkpoint;
  if (command.batches > 0) job.eval.batches = command.batches;
  auto meta = read_checkpoint_meta_for(command.checkpoint, job);
  if (size > 1) SPW_TRY(agree_on_status(comm, meta.status()));
  SPW_TRY(meta.status());
  // Where eval.json goes is checked before the evaluation, not after it.
  Status writable = Status::success();
  if (rank == 0 && command.output_path.empty()) writable = ensure_directory(job.output.dir);
  if (size > 1) SPW_TRY(agree_on_status(comm, writable));
  SPW_TRY(writable);
  StoredPlanUse stored;
  if (size > 1) {
    SPW_ASSIGN_OR_RETURN(stored, use_stored_plan(job, comm));
    job = stored.job;
  }
  SPW_ASSIGN_OR_RETURN(PipelineLayout layout, requested_layout(job, size));

  const auto start = std::chrono::steady_clock::now();
  double loss = 0;
  if (layout.world_size() == 1 && layout.chunks == 1 && job.offload.tier == OffloadTier::none) {
    SPW_ASSIGN_OR_RETURN(loss, evaluate_on_one_rank(job));
  } else {
    SPW_ASSIGN_OR_RETURN(PipelineJob opened, open_forwards_only_job(job, comm));
    if (rank == 0) {
      std::fprintf(stderr, "spillway: evaluating on %d ranks (%s%s)\n", size,
                   opened.executor->layout().describe().c_str(),
                   layout_source(stored, opened.planned).c_str());
    }
    SPW_TRY(opened.executor->open_evaluation_data());
    // From here a failure may strand peers inside MPI calls: only the job's end frees them.
    scope = FailureScope::this_rank;
    const Result<double> evaluated = opened.executor->evaluate(job.eval.batches);
    if (!evaluated.ok()) {
      abandon_executor(opened);
      return evaluated.status();
    }
    loss = *evaluated;
    scope = FailureScope::all_ranks;
  }
  const double seconds = seconds_since(start);
  if (rank != 0) return Status::success();

  const std::string path =
      command.output_path.empty() ? job.output.dir + "/eval.json" : command.output_path;
  const nlohmann::json record = {{"checkpoint", command.checkpoint},
                                 {"step", meta->step},
                                 {"loss", loss},
                                 {"batches", job.eval.batches},
                                 {"samples_per_batch", job.train.batch},
                                 {"seconds", seconds},
                                 {"ranks", size},
                                 {"config", to_json(job)}};
  SPW_TRY(write_json_atomically(path, record));
  std::printf("spillway: %s (step %lld): eval loss %.4f on %d held-out batch%s of %d, %.2f s; "
              "%s\n",
              command.checkpoint.c_str(), static_cast<long long>(meta->step), loss,
              job.eval.batches, job.eval.batches == 1 ? "" : "es", job.train.batch, seconds,
              path.c_str());
  return Status::success();
}

}  // namespace spw
