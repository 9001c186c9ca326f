#include "runtime/sample_command.hpp"

#include <cstdio>

#include "kernels/threading.hpp"
#include "runtime/train_command.hpp"
#include "runtime/trainer.hpp"

namespace spw {

Status run_sample_command(const SampleCommand& command) {
  SPW_ASSIGN_OR_RETURN(JobConfig job, load_job_file(command.config_path, command.overrides));
  job.train.init_from = command.checkpoint;
  SPW_ASSIGN_OR_RETURN(TrainSettings settings, train_settings_from(job));
  settings.inference_only = true;
  ThreadRequest threads;
  threads.threads = job.threads.count;
  SPW_TRY(setup_threads(threads).status());
  SPW_ASSIGN_OR_RETURN(auto trainer, Trainer::create(settings));
  SPW_ASSIGN_OR_RETURN(const std::string text, sample_text(*trainer, command.settings));
  std::fwrite(command.settings.prompt.data(), 1, command.settings.prompt.size(), stdout);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  return Status::success();
}

}  // namespace spw
