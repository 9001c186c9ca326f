// `spillway train` on more than one rank (or more than one chunk): the pipeline executor,
// with progress on rank 0 and report.json, trace.json and timeline.svg written by rank 0.
#include "runtime/pipeline_command.hpp"

#include <chrono>
#include <cstdio>
#include <optional>

#include "kernels/memory_ledger.hpp"
#include "runtime/best_checkpoint.hpp"
#include "runtime/json_file.hpp"
#include "runtime/node_facts.hpp"
#include "runtime/op_report.hpp"
#include "runtime/pipeline_checkpoint.hpp"
#include "runtime/pipeline_job.hpp"
#include "runtime/pipeline_report.hpp"
#include "runtime/progress.hpp"
#include "runtime/report.hpp"
#include "runtime/stop_request.hpp"

namespace spw {

namespace {

// A stash whose copy to the tier failed stays in memory and the run goes on (a full disk
// under the file tier, say), so it is said at the end, per rank: report.json alone counted
// them, and a run that asked to offload kept its stashes without a word.
void warn_of_failed_evictions(const nlohmann::json& ranks) {
  std::fflush(stdout);  // after the run's last lines, where a terminal shows both streams
  for (const nlohmann::json& r : ranks) {
    const double failed = r["offload"].value("failed_evictions", 0.0);
    if (failed <= 0) continue;
    std::fprintf(stderr,
                 "spillway: warning: rank %d: %.0f stash copies to the offload tier failed and "
                 "those stashes stayed in memory; the first: %s\n",
                 r.value("rank", -1), failed,
                 r["offload"].value("first_failed_eviction", std::string("?")).c_str());
  }
}

// Trains the opened job and writes its report; scope says who shares a failure.
Result<RunEnd> train_opened_job(const JobConfig& job, const TrainCommand& command,
                                PipelineJob& opened, FailureScope& scope) {
  MPI_Comm comm = opened.world;
  const int rank = opened.rank;
  const PipelineSettings& settings = opened.settings;
  const PipelineLayout& layout = settings.layout;
  const ThreadSetup& threads = opened.threads;
  PipelineExecutor* executor = opened.executor.get();
  if (opened.planned && rank == 0 && !opened.plan_kept_from.empty()) {
    std::printf(
        "spillway: automatic plan kept from %s (the resumed run's, its job keys unchanged): "
        "%s\n%s\n",
        opened.plan_kept_from.c_str(), layout.describe().c_str(), opened.plan_explanation.c_str());
  } else if (opened.planned && rank == 0) {
    const std::string not_kept =
        opened.plan_not_kept.empty() ? "" : "; the stored plan not kept: " + opened.plan_not_kept;
    std::printf("spillway: automatic plan (profile, links and plan.json in %s%s): %s\n%s\n",
                job.output.dir.c_str(), not_kept.c_str(), layout.describe().c_str(),
                opened.plan_explanation.c_str());
  } else if (!opened.plan_record.is_null() && rank == 0) {
    std::printf("spillway: predicted (profile, links and plan.json in %s): %s\n",
                job.output.dir.c_str(),
                opened.plan_record["explanation"].get<std::string>().c_str());
  }
  if (!command.resume_from.empty() && executor->steps_done() >= executor->total_steps()) {
    return error(StatusCode::invalid_argument,
                 "checkpoint " + command.resume_from + " is at step " +
                     std::to_string(executor->steps_done()) + " and the job has " +
                     std::to_string(executor->total_steps()) +
                     " steps: raise train.steps to train on");
  }
  SPW_ASSIGN_OR_RETURN(const RankNodes nodes, gather_rank_nodes(comm));
  // From here a failure may strand peers inside MPI calls: only the job's end frees them.
  scope = FailureScope::this_rank;
  SPW_ASSIGN_OR_RETURN(LinkEstimates links, measure_links(*executor, comm));

  const std::int64_t total = executor->total_steps();
  const char* item_name = settings.train.model.kind == "gpt" ? "tokens" : "samples";
  if (rank == 0) {
    std::printf("spillway: %s, %zu parameters, %d ranks (%s), %d thread(s) per rank, %lld "
                "steps, output in %s\n",
                settings.train.model.kind.c_str(), executor->model_parameter_count(),
                layout.world_size(), layout.describe().c_str(), threads.threads,
                static_cast<long long>(total), job.output.dir.c_str());
    std::printf("spillway: data: %s\n", executor->data_description().c_str());
    std::fputs(describe_kernel_choice(threads.blas).c_str(), stdout);
    std::fflush(stdout);
  }

  const nlohmann::json config_json = to_json(job);
  RunRecord record;
  record.config = config_json;
  record.data = executor->data_description();
  record.item_name = item_name;
  record.parameters = executor->model_parameter_count();
  record.threads = threads.threads;
  record.blas = threads.blas;
  record.ranks = layout.world_size();
  ProgressPrinter progress(stdout, total, 0, /*redraw=*/false);
  const auto start = std::chrono::steady_clock::now();
  StepOpTimes op_times_per_step;
  std::optional<EarlyStop> stopped;
  BestCheckpoint best;
  if (job.output.keep_best) {
    const std::int64_t resumed = command.resume_from.empty() ? -1 : executor->steps_done();
    auto record_so_far = agree_on_best_record(comm, job.output.dir, resumed);
    if (!record_so_far.ok()) {
      scope = FailureScope::all_ranks;  // agreed
      return record_so_far.status();
    }
    best = *record_so_far;
  }
  while (executor->steps_done() < total) {
    StepResult step;
    op_times_per_step.start_step();
    SPW_TRY(executor->run_step(step));
    op_times_per_step.end_step(step.seconds);
    record_step(record, step);
    if (rank == 0) {
      const double elapsed = seconds_since(start);
      progress.print({step.step, total, step.loss, step.items_per_second, item_name, elapsed,
                      MemoryLedger::process().peak_total()});
    }
    if (job.eval.after(step.step, total)) {
      const auto started = std::chrono::steady_clock::now();
      SPW_ASSIGN_OR_RETURN(const double loss, executor->evaluate(job.eval.batches));
      record_evaluation(record, rank == 0 ? stdout : nullptr,
                        {step.step, loss, seconds_since(started)}, job.eval.batches);
      if (job.output.keep_best) {
        const Status kept = keep_if_best(
            comm, job.output.dir, step.step, loss, best,
            [&](const std::string& path) {
              return save_pipeline_checkpoint(*executor, comm, path, config_json.dump());
            },
            rank == 0 ? stdout : nullptr);
        if (!kept.ok()) {
          scope = FailureScope::all_ranks;  // agreed, as for the scheduled checkpoints
          return kept;
        }
      }
    }
    const bool scheduled =
        job.output.checkpoint_every > 0 && step.step % job.output.checkpoint_every == 0;
    int stop = 0;
    if (executor->steps_done() < total) {
      SPW_ASSIGN_OR_RETURN(stop, agree_on_stop(comm));
    }
    if (scheduled || stop != 0) {
      const Status saved = save_pipeline_checkpoint(*executor, comm,
                                                    checkpoint_path(job, step.step),
                                                    config_json.dump());
      if (!saved.ok()) {
        // Agreed: every rank returns this error and none is left waiting.
        scope = FailureScope::all_ranks;
        return saved;
      }
    }
    if (stop != 0) {
      stopped = EarlyStop{stop, step.step, total, checkpoint_path(job, step.step)};
      break;
    }
  }
  if (rank == 0) progress.finish();
  record.elapsed_seconds = seconds_since(start);

  SPW_ASSIGN_OR_RETURN(nlohmann::json pipeline,
                       pipeline_report(*executor, comm, links, nodes.node_of));
  SPW_ASSIGN_OR_RETURN(std::vector<TraceEvent> events, gather_trace(*executor, comm));
  SPW_ASSIGN_OR_RETURN(GatheredTimeByOp op_times, gather_time_by_op(op_times_per_step, comm));
  const RunEnd end = stopped ? RunEnd::stopped : RunEnd::completed;
  if (rank != 0) return end;
  for (std::size_t r = 0; r < op_times.ranks.size(); ++r) {
    pipeline["measured"]["ranks"][r]["time_by_op"] = op_times.ranks[r];
  }
  pipeline["measured"]["time_by_op"] = op_times.all_ranks;

  const double items_per_step =
      static_cast<double>(settings.train.batch * settings.train.model.positions_per_sample());
  nlohmann::json report = make_report(record, items_per_step, MemoryLedger::process().snapshot());
  if (best.step >= 0) report["best"] = to_json(best, job.output.dir);
  std::string plan_note;
  if (!opened.plan_record.is_null()) {
    // The planner's prediction, made before the run from a profile and the links, beside
    // what the run measured (pipeline.predicted is the simulator fed this run's own costs).
    pipeline["plan"] = opened.plan_record;
    const double predicted = opened.plan_record["predicted"]["iteration_seconds"].get<double>();
    const double measured = pipeline["measured"]["iteration_seconds"].get<double>();
    pipeline["plan_vs_measured"] = {
        {"predicted_iteration_seconds", predicted},
        {"measured_iteration_seconds", measured},
        {"measured_over_predicted", predicted > 0 ? measured / predicted : 0.0},
        {"predicted_bubble_fraction", opened.plan_record["predicted"]["bubble_fraction"]},
        {"measured_bubble_fraction", pipeline["measured"]["bubble_fraction"]}};
    char text[160];
    std::snprintf(text, sizeof text, "; iteration %.3g s against %.3g s planned (%.2fx)",
                  measured, predicted, predicted > 0 ? measured / predicted : 0.0);
    plan_note = text;
  }
  report["pipeline"] = pipeline;
  if (stopped) report["stopped"] = to_json(*stopped);
  report["nodes"] = nodes_report(nodes.node_of, nodes.nodes);
  const std::string report_path = job.output.dir + "/report.json";
  SPW_TRY(write_json_atomically(report_path, report));
  std::string timeline_note;
  if (job.output.trace) {
    TraceMeta meta;
    meta.title = settings.train.model.kind + ", " + layout.describe();
    meta.ranks = layout.world_size();
    SPW_TRY(write_chrome_trace(job.output.dir + "/trace.json", events, meta));
    SPW_TRY(write_timeline_svg(job.output.dir + "/timeline.svg", events, meta));
    timeline_note = "; trace " + job.output.dir + "/trace.json, timeline " + job.output.dir +
                    "/timeline.svg";
  }
  std::printf("spillway: final loss %.4f, median %.0f %s/s, bubble %.1f%% (simulator %.1f%%)%s, "
              "report %s%s\n",
              record.loss.back(), report["throughput"]["median"].get<double>(), item_name,
              100 * pipeline["measured"]["bubble_fraction"].get<double>(),
              100 * pipeline["predicted"].value("bubble_fraction", 0.0), plan_note.c_str(),
              report_path.c_str(), timeline_note.c_str());
  std::printf("spillway: time by op, per step, all ranks: %s\n",
              describe_time_by_op(op_times.all_ranks, 4).c_str());
  warn_of_failed_evictions(pipeline["measured"]["ranks"]);
  if (stopped) std::printf("%s\n", describe(*stopped, command).c_str());
  return end;
}

}  // namespace

Result<RunEnd> run_pipeline_job(const JobConfig& job, const TrainCommand& command, MPI_Comm comm,
                                FailureScope& scope) {
  scope = FailureScope::all_ranks;
  PipelineJobOptions options;
  options.trace = true;
  options.lock_output_dir = true;
  options.resume_from = command.resume_from;
  options.predict = command.predict;
  SPW_ASSIGN_OR_RETURN(PipelineJob opened, open_pipeline_job(job, comm, options));
  Result<RunEnd> end = train_opened_job(job, command, opened, scope);
  if (!end.ok() && scope == FailureScope::this_rank) abandon_executor(opened);
  return end;
}

}  // namespace spw
