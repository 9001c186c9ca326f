#include "runtime/train_command.hpp"

#include <chrono>
#include <cstdio>
#include <optional>

#include "kernels/memory_ledger.hpp"
#include "kernels/threading.hpp"
#include "runtime/best_checkpoint.hpp"
#include "runtime/checkpoint_model.hpp"
#include "runtime/json_file.hpp"
#include "runtime/mpi_support.hpp"
#include "runtime/node_facts.hpp"
#include "runtime/op_report.hpp"
#include "runtime/output_lock.hpp"
#include "runtime/pipeline_command.hpp"
#include "runtime/pipeline_job.hpp"
#include "runtime/progress.hpp"
#include "runtime/report.hpp"
#include "runtime/stop_request.hpp"

namespace spw {

ModelSpec model_spec_from(const ModelConfig& model) {
  ModelSpec spec;
  spec.kind = model.kind == ModelKind::gpt ? "gpt" : "mlp";
  spec.gpt.layers = model.layers;
  spec.gpt.d_model = model.d_model;
  spec.gpt.heads = model.heads;
  spec.gpt.seq = model.seq;
  spec.gpt.vocab = model.vocab;
  spec.gpt.ln_eps = static_cast<float>(model.ln_eps);
  spec.gpt.head_chunk_rows = model.head_chunk_rows;
  spec.dims.assign(model.dims.begin(), model.dims.end());
  for (const auto& [layer, heads] : model.split_layers) spec.splits.push_back({layer, heads});
  return spec;
}

Result<TrainSettings> train_settings_from(const JobConfig& job) {
  TrainSettings s;
  s.model = model_spec_from(job.model);
  s.data = job.data;
  s.batch = job.train.batch;
  s.microbatches = job.train.microbatches;
  s.steps = job.train.steps.value_or(0);
  s.epochs = job.train.epochs.value_or(0);
  s.optimizer.kind = job.train.optimizer == OptimizerKind::sgd ? "sgd" : "adamw";
  s.optimizer.lr = job.train.lr;
  s.optimizer.momentum = job.train.momentum;
  s.optimizer.beta1 = job.train.beta1;
  s.optimizer.beta2 = job.train.beta2;
  s.optimizer.eps = job.train.eps;
  s.optimizer.weight_decay = job.train.weight_decay;
  s.optimizer.schedule.decay = job.train.lr_decay;
  s.optimizer.schedule.warmup_steps = job.train.warmup_steps;
  s.optimizer.schedule.decay_steps = job.train.decay_steps.value_or(0);
  s.optimizer.schedule.min_lr = job.train.min_lr;
  s.clip_grad_norm = job.train.clip_grad_norm;
  s.seed = job.train.seed;
  s.init_from = job.train.init_from;
  s.memory_cap = job.memory.cap;
  s.layout = job.parallel.layout;
  s.offload = job.offload;
  s.split_layers_auto = job.model.split_layers_auto;
  s.head_chunk_auto = job.model.head_chunk_auto;
  s.evaluates = job.eval.every > 0;
  return s;
}

std::string checkpoint_path(const JobConfig& job, std::int64_t step) {
  return job.output.dir + "/checkpoint-" + std::to_string(step) + ".h5";
}

nlohmann::json to_json(const EarlyStop& stop) {
  return {{"signal", signal_name(stop.signal_number)},
          {"step", stop.step},
          {"steps", stop.total},
          {"checkpoint", stop.checkpoint}};
}

std::string describe(const EarlyStop& stop, const TrainCommand& command) {
  std::string text = "spillway: stopped after step " + std::to_string(stop.step) + " of " +
                     std::to_string(stop.total) + " on " + signal_name(stop.signal_number) +
                     "; checkpoint " + stop.checkpoint +
                     "\nspillway: to go on, run the same command with --resume " +
                     stop.checkpoint;
  if (!command.resume_from.empty()) text += " instead of --resume " + command.resume_from;
  return text;
}

namespace {

Result<RunEnd> run_single_rank(const JobConfig& job, const TrainCommand& command) {
  SPW_ASSIGN_OR_RETURN(TrainSettings settings, train_settings_from(job));
  settings.resume_from = command.resume_from;
  if (!command.resume_from.empty()) {
    SPW_TRY(read_checkpoint_meta_for(command.resume_from, job).status());
  }
  SPW_TRY(ensure_directory(job.output.dir));
  SPW_ASSIGN_OR_RETURN(const OutputDirLock lock, OutputDirLock::acquire(job.output.dir));

  ThreadRequest threads;
  threads.threads = job.threads.count;
  SPW_ASSIGN_OR_RETURN(ThreadSetup thread_setup, setup_threads(threads));

  SPW_ASSIGN_OR_RETURN(auto trainer, Trainer::create(settings));
  const nlohmann::json config_json = to_json(job);
  const std::int64_t total = trainer->total_steps();
  const double items_per_step =
      static_cast<double>(settings.batch * settings.model.positions_per_sample());
  std::printf("spillway: %s, %zu parameters, %d thread(s), %lld steps, output in %s\n",
              settings.model.kind.c_str(), trainer->model().parameter_count(),
              thread_setup.threads, static_cast<long long>(total), job.output.dir.c_str());
  std::printf("spillway: data: %s\n", trainer->data_description().c_str());
  std::fputs(describe_kernel_choice(thread_setup.blas).c_str(), stdout);
  std::fflush(stdout);

  RunRecord record;
  record.config = config_json;
  record.data = trainer->data_description();
  record.item_name = trainer->item_name();
  record.parameters = trainer->model().parameter_count();
  record.threads = thread_setup.threads;
  record.blas = thread_setup.blas;
  ProgressPrinter progress(stdout, total);
  const auto start = std::chrono::steady_clock::now();
  const std::int64_t per_epoch = settings.epochs > 0 ? trainer->steps_per_epoch() : 0;
  StepOpTimes op_times_per_step;
  std::optional<EarlyStop> stopped;
  BestCheckpoint best;
  if (job.output.keep_best) {
    const std::int64_t resumed = command.resume_from.empty() ? -1 : trainer->steps_done();
    SPW_ASSIGN_OR_RETURN(best, agree_on_best_record(MPI_COMM_SELF, job.output.dir, resumed));
  }
  while (trainer->steps_done() < total) {
    StepResult step;
    op_times_per_step.start_step();
    SPW_TRY(trainer->run_step(step));
    op_times_per_step.end_step(step.seconds);
    record_step(record, step);
    const double elapsed = seconds_since(start);
    progress.print({step.step, total, step.loss, step.items_per_second, trainer->item_name(),
                    elapsed, MemoryLedger::process().peak_total()});
    if (job.eval.after(step.step, total)) {
      const auto started = std::chrono::steady_clock::now();
      SPW_ASSIGN_OR_RETURN(const double loss, trainer->evaluate(job.eval.batches));
      progress.finish();
      record_evaluation(record, stdout, {step.step, loss, seconds_since(started)},
                        job.eval.batches);
      if (job.output.keep_best) {
        SPW_TRY(keep_if_best(
            MPI_COMM_SELF, job.output.dir, step.step, loss, best,
            [&](const std::string& path) {
              return trainer->save_checkpoint(path, config_json.dump());
            },
            stdout));
      }
    }
    const bool scheduled =
        job.output.checkpoint_every > 0 && step.step % job.output.checkpoint_every == 0;
    const int stop = trainer->steps_done() < total ? stop_signal() : 0;
    if (scheduled || stop != 0) {
      SPW_TRY(trainer->save_checkpoint(checkpoint_path(job, step.step), config_json.dump()));
    }
    if (per_epoch > 0 && step.step % per_epoch == 0) {
      auto accuracy = trainer->test_accuracy();
      if (accuracy.ok()) {
        progress.finish();
        record.test_accuracy.push_back(*accuracy);
        std::printf("epoch %lld: test accuracy %.4f\n",
                    static_cast<long long>(step.step / per_epoch), *accuracy);
      }
    }
    if (stop != 0) {
      stopped = EarlyStop{stop, step.step, total, checkpoint_path(job, step.step)};
      break;
    }
  }
  progress.finish();
  record.elapsed_seconds = seconds_since(start);

  nlohmann::json report = make_report(record, items_per_step, MemoryLedger::process().snapshot());
  report["time_by_op"] = time_by_op(op_times_per_step);
  if (stopped) report["stopped"] = to_json(*stopped);
  if (best.step >= 0) report["best"] = to_json(best, job.output.dir);
  std::vector<sched::NodeFacts> nodes;
  if (auto facts = this_node_facts(processor_name()); facts.ok()) nodes.push_back(*facts);
  report["nodes"] = nodes_report({0}, nodes);
  const std::string report_path = job.output.dir + "/report.json";
  SPW_TRY(write_json_atomically(report_path, report));
  std::printf("spillway: final loss %.4f, median %.0f %s/s, peak %s; report %s\n",
              record.loss.back(), report["throughput"]["median"].get<double>(),
              record.item_name.c_str(), format_bytes(MemoryLedger::process().peak_total()).c_str(),
              report_path.c_str());
  std::printf("spillway: time by op, per step: %s\n",
              describe_time_by_op(report["time_by_op"], 4).c_str());
  if (stopped) std::printf("%s\n", describe(*stopped, command).c_str());
  return stopped ? RunEnd::stopped : RunEnd::completed;
}

}  // namespace

Result<RunEnd> run_train_command(const TrainCommand& command, MPI_Comm comm,
                                 FailureScope& scope) {
  scope = FailureScope::all_ranks;
  int size = 1;
  MPI_Comm_size(comm, &size);
  auto job = load_job_on_ranks(command.config_path, command.overrides, comm);
  if (!job.ok()) return job.status();
  SPW_ASSIGN_OR_RETURN(PipelineLayout layout, requested_layout(*job, size));
  // The single-rank trainer is the reference; everything it does not do (chunks, offload, a
  // plan that chooses the head) runs on the pipeline executor, which also runs on one rank.
  if (layout.world_size() == 1 && layout.chunks == 1 && job->offload.tier == OffloadTier::none &&
      !job->model.head_chunk_auto && !command.predict) {
    return run_single_rank(*job, command);
  }
  return run_pipeline_job(*job, command, comm, scope);
}

}  // namespace spw
