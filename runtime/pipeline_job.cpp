#include "runtime/pipeline_job.hpp"

#include "runtime/auto_plan.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/checkpoint_model.hpp"
#include "runtime/engine_binding.hpp"
#include "runtime/json_file.hpp"
#include "runtime/mpi_support.hpp"
#include "runtime/pipeline_checkpoint.hpp"
#include "runtime/stored_plan.hpp"
#include "runtime/train_command.hpp"

namespace spw {

OwnedComm& OwnedComm::operator=(OwnedComm&& other) noexcept {
  if (this != &other) {
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    comm_ = other.comm_;
    other.comm_ = MPI_COMM_NULL;
  }
  return *this;
}

OwnedComm::~OwnedComm() {
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

Result<PipelineJob> open_forwards_only_job(JobConfig job, MPI_Comm comm) {
  job.offload = OffloadConfig{};
  job.output.dir.clear();
  PipelineJobOptions options;
  options.create_output_dir = false;
  options.inference_only = true;
  return open_pipeline_job(job, comm, options);
}

void abandon_executor(PipelineJob& job) { static_cast<void>(job.executor.release()); }

Result<JobConfig> load_job_on_ranks(const std::string& path,
                                    const std::vector<std::string>& overrides, MPI_Comm comm) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  auto job = load_job_file(path, overrides);
  if (size > 1) SPW_TRY(agree_on_status(comm, job.status()));
  return job;
}

Result<PipelineLayout> requested_layout(const JobConfig& job, int world_size) {
  const ModelSpec model = model_spec_from(job.model);
  return make_pipeline_layout(job.parallel, model.block_count(), job.train.batch,
                              job.train.microbatches, world_size);
}

namespace {

// This rank's part of the setup before any collective step; agreed by the caller. The one
// collective in it (grouping the ranks by node) comes first, before anything that can fail
// on one rank alone (rank 0's output directory): a rank returning early would leave the
// others in a collective it never joins.
Status local_setup(const JobConfig& job, const PipelineJobOptions& options, MPI_Comm comm,
                   PipelineJob& out, std::int64_t& first_step) {
  SPW_ASSIGN_OR_RETURN(NodeShare share, node_share(comm));
  SPW_ASSIGN_OR_RETURN(out.settings.train, train_settings_from(job));
  out.settings.train.inference_only = options.inference_only;
  const bool plans = job.parallel.stages.form == StagesSpec::Form::automatic || options.predict;
  // An empty output.dir (spillway sample's) plans without writing or reading any file.
  if (out.rank == 0 && !job.output.dir.empty() && (options.create_output_dir || plans)) {
    SPW_TRY(ensure_directory(job.output.dir));
    if (options.lock_output_dir) {
      SPW_ASSIGN_OR_RETURN(out.output_lock, OutputDirLock::acquire(job.output.dir));
    }
  }
  ThreadRequest request;
  request.threads = job.threads.count;
  request.local_rank = share.local_rank;
  request.local_ranks = share.local_ranks;
  SPW_ASSIGN_OR_RETURN(out.threads, setup_threads(request));
  SPW_ASSIGN_OR_RETURN(out.settings.engine,
                       engine_binding_for(job.offload.engine_pu, out.threads));
  if (!options.resume_from.empty()) {
    SPW_ASSIGN_OR_RETURN(CheckpointMeta meta, read_checkpoint_meta_for(options.resume_from, job));
    first_step = meta.step;
  }
  return Status::success();
}

}  // namespace

Result<PipelineJob> open_pipeline_job(const JobConfig& job, MPI_Comm comm,
                                      const PipelineJobOptions& options) {
  int size = 1;
  SPW_TRY(mpi_check(MPI_Comm_size(comm, &size), "reading the job's size"));
  SPW_ASSIGN_OR_RETURN(PipelineLayout layout, requested_layout(job, size));

  PipelineJob out;
  out.world = comm;
  SPW_TRY(mpi_check(MPI_Comm_rank(comm, &out.rank), "reading this rank's index"));
  out.settings.layout = layout;
  out.settings.offload = job.offload;
  std::int64_t first_step = 0;  // where a resumed run starts
  SPW_TRY(agree_on_status(comm, local_setup(job, options, comm, out, first_step)));

  if (job.parallel.stages.form == StagesSpec::Form::automatic) {
    KeptPlan kept;
    if (!options.resume_from.empty()) {
      SPW_ASSIGN_OR_RETURN(kept, plan_to_resume_with(job, comm));
    }
    AutoPlan plan;
    if (kept.plan) {
      plan = std::move(*kept.plan);
      out.plan_kept_from = kept.path;
    } else {
      SPW_ASSIGN_OR_RETURN(
          plan, plan_automatically(out.settings.train, comm, job.output.dir, planning_keys(job)));
      out.plan_not_kept = kept.not_kept;
    }
    SPW_ASSIGN_OR_RETURN(MPI_Comm in_order, communicator_in_plan_order(comm, plan.world_rank));
    out.plan_order = OwnedComm(in_order);
    out.world = in_order;
    SPW_TRY(mpi_check(MPI_Comm_rank(in_order, &out.rank), "reading this rank's plan index"));
    out.settings.layout = plan.layout;
    out.settings.train.model.splits = plan.splits;
    if (plan.head_chunk_rows) out.settings.train.model.gpt.head_chunk_rows = *plan.head_chunk_rows;
    out.planned = true;
    out.plan_explanation = plan.explanation;
    out.plan_record = plan.record;
    if (job.offload.tier == OffloadTier::automatic) {
      out.settings.offload.tier = plan.offload_tier;
      out.settings.offload.keep = plan.offload_keep;
      out.settings.offload.lookahead = plan.offload_lookahead;
    }
  } else if (options.predict) {
    SPW_ASSIGN_OR_RETURN(AutoPlan predicted,
                         predict_requested_layout(out.settings.train, layout, job.offload, comm,
                                                  job.output.dir));
    out.plan_record = predicted.record;
  }
  // The job reader allows "auto" only with planned stages, so the plan has replaced it.
  if (out.settings.offload.tier == OffloadTier::automatic) {
    return error(StatusCode::internal,
                 "offload.tier = \"auto\" reached a job without an automatic plan");
  }

  const std::int64_t planned_steps =
      out.settings.train.steps > 0 ? out.settings.train.steps : std::int64_t{1} << 40;
  // The first step of a run is its warm-up: trace from the second on.
  out.settings.trace_first_step =
      static_cast<int>(first_step + (planned_steps - first_step >= 2 ? 2 : 1));
  out.settings.trace_steps = options.trace && job.output.trace ? 3 : 0;
  SPW_ASSIGN_OR_RETURN(out.executor, PipelineExecutor::create(out.settings, out.world));
  if (!options.resume_from.empty()) {
    SPW_TRY(load_pipeline_checkpoint(*out.executor, out.world, options.resume_from));
  }
  return out;
}

}  // namespace spw
