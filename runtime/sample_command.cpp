#include "runtime/sample_command.hpp"

#include <charconv>
#include <cstdio>
#include <string_view>

#include "kernels/threading.hpp"
#include "runtime/checkpoint_model.hpp"
#include "runtime/mpi_support.hpp"
#include "runtime/pipeline_job.hpp"
#include "runtime/stored_plan.hpp"
#include "runtime/train_command.hpp"
#include "runtime/trainer.hpp"

namespace spw {

Result<std::vector<std::int32_t>> parse_token_ids(const std::string& text) {
  std::vector<std::int32_t> ids;
  std::size_t at = 0;
  while (at < text.size()) {
    if (text[at] == ' ' || text[at] == ',' || text[at] == '\t' || text[at] == '\n') {
      ++at;
      continue;
    }
    std::size_t end = at;
    while (end < text.size() && text[end] != ' ' && text[end] != ',' && text[end] != '\t' &&
           text[end] != '\n') {
      ++end;
    }
    const std::string_view word(text.data() + at, end - at);
    std::int32_t id = 0;
    const auto [stop, ec] = std::from_chars(word.data(), word.data() + word.size(), id);
    if (ec != std::errc() || stop != word.data() + word.size() || id < 0) {
      return error(
          StatusCode::invalid_argument,
          "--prompt-ids: '" + std::string(word) + "' is not a token id (a non-negative integer)");
    }
    ids.push_back(id);
    at = end;
  }
  if (ids.empty()) {
    return error(StatusCode::invalid_argument,
                 "--prompt-ids holds no token id: give ids separated by spaces or commas");
  }
  return ids;
}

namespace {

// Prints the prompt and its continuation: text, or ids on one line.
void print_sample(const SampleCommand& command, const std::vector<std::int32_t>& prompt_ids,
                  const std::vector<std::int32_t>& ids, const std::string& text) {
  if (!prompt_ids.empty()) {
    std::string line;
    for (std::int32_t id : prompt_ids) line += std::to_string(id) + ' ';
    for (std::int32_t id : ids) line += std::to_string(id) + ' ';
    line.back() = '\n';
    std::fputs(line.c_str(), stdout);
    return;
  }
  std::fwrite(command.settings.prompt.data(), 1, command.settings.prompt.size(), stdout);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
}

// The continuation from `logits`: ids when prompt_ids is not empty, else text.
Status sample_and_print(const SampleCommand& command, const ModelSpec& model,
                        const NextTokenLogits& logits, const std::vector<std::int32_t>& prompt_ids,
                        bool prints) {
  std::vector<std::int32_t> ids;
  std::string text;
  if (!prompt_ids.empty()) {
    SPW_ASSIGN_OR_RETURN(ids, sample_tokens(model, logits, prompt_ids, command.settings));
  } else {
    SPW_ASSIGN_OR_RETURN(text, sample_text(model, logits, command.settings));
  }
  if (prints) print_sample(command, prompt_ids, ids, text);
  return Status::success();
}

// One process holds the whole model, its parameters alone.
Status sample_on_one_rank(const SampleCommand& command, const JobConfig& job,
                          const std::vector<std::int32_t>& prompt_ids) {
  SPW_ASSIGN_OR_RETURN(TrainSettings settings, train_settings_from(job));
  settings.inference_only = true;
  ThreadRequest threads;
  threads.threads = job.threads.count;
  SPW_TRY(setup_threads(threads).status());
  SPW_ASSIGN_OR_RETURN(auto trainer, Trainer::create(settings));
  return sample_and_print(command, settings.model, trainer_logits(*trainer), prompt_ids, true);
}

// The job as the pipeline that samples runs it. Every sample gets the same window, so more
// than one only repeats work: where the stages are given, microbatches of one sample, as few
// as the schedule takes (one, or one per pipeline rank for the interleaved schedule, else the
// job's count); where the planner chooses, a batch of one sample, whose training holds one
// stash a chunk as a forward does (the planner prices training). Synthetic data, since no
// sample is read (a corpus or token file need not be at hand). open_forwards_only_job drops
// its offload and output directory.
JobConfig sampling_job(JobConfig job, const PipelineLayout& requested, int world_size) {
  if (job.parallel.stages.form == StagesSpec::Form::automatic) {
    job.train.batch = 1;
    job.train.microbatches = 1;
  } else {
    for (const int m : {1, requested.pipeline_ranks, requested.microbatches}) {
      JobConfig candidate = job;
      // train.microbatches counts the whole batch's, every replica's.
      candidate.train.microbatches = requested.replicas * m;
      candidate.train.batch = requested.replicas * m;
      if (requested_layout(candidate, world_size).ok()) {
        job = std::move(candidate);
        break;
      }
    }
  }
  job.data = DataConfig{};
  job.data.source = DataKind::synthetic;
  job.eval.every = 0;
  return job;
}

}  // namespace

Status run_sample_command(const SampleCommand& command, MPI_Comm comm, FailureScope& scope) {
  scope = FailureScope::all_ranks;
  int size = 1;
  MPI_Comm_size(comm, &size);
  SPW_ASSIGN_OR_RETURN(JobConfig job,
                       load_job_on_ranks(command.config_path, command.overrides, comm));
  job.train.init_from = command.checkpoint;
  // Loading it as init_from would take any model's datasets that fit (checkpoint_model.hpp).
  const Status same_model = read_checkpoint_meta_for(command.checkpoint, job).status();
  SPW_TRY(size > 1 ? agree_on_status(comm, same_model) : same_model);
  // The sampler reads the logits, which a chunked head does not keep; one window's logits
  // are small.
  job.model.head_chunk_rows = 0;
  job.model.head_chunk_auto = false;
  std::vector<std::int32_t> prompt_ids;
  if (!command.prompt_ids.empty()) {
    SPW_ASSIGN_OR_RETURN(prompt_ids, parse_token_ids(command.prompt_ids));
  }
  // Before any collective pass, so that every rank stops alike on a bad request.
  SPW_TRY(check_sample_request(model_spec_from(job.model), command.settings,
                               prompt_ids.empty() ? nullptr : &prompt_ids));
  if (size == 1) return sample_on_one_rank(command, job, prompt_ids);

  SPW_ASSIGN_OR_RETURN(const StoredPlanUse stored, use_stored_plan(job, comm));
  SPW_ASSIGN_OR_RETURN(const PipelineLayout requested, requested_layout(stored.job, size));
  SPW_ASSIGN_OR_RETURN(PipelineJob opened,
                       open_forwards_only_job(sampling_job(stored.job, requested, size), comm));
  PipelineExecutor& executor = *opened.executor;
  if (opened.rank == 0) {
    // stderr: stdout holds the sample alone.
    std::fprintf(stderr, "spillway: sampling on %d ranks (%s%s), a forward through them a token\n",
                 size, executor.layout().describe().c_str(),
                 layout_source(stored, opened.planned).c_str());
  }
  const NextTokenLogits logits = [&executor](const std::vector<std::int32_t>& window,
                                             std::size_t last) {
    return executor.next_token_logits(window, last);
  };
  // From here a failure may strand peers inside MPI calls: only the job's end frees them.
  scope = FailureScope::this_rank;
  const Status sampled = sample_and_print(command, executor.settings().train.model, logits,
                                          prompt_ids, opened.rank == 0);
  if (!sampled.ok()) {
    abandon_executor(opened);
    return sampled;
  }
  scope = FailureScope::all_ranks;
  return Status::success();
}

}  // namespace spw
