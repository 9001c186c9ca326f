#include "runtime/sample_command.hpp"

#include <charconv>
#include <cstdio>
#include <string_view>

#include "kernels/threading.hpp"
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

Status run_sample_command(const SampleCommand& command) {
  SPW_ASSIGN_OR_RETURN(JobConfig job, load_job_file(command.config_path, command.overrides));
  job.train.init_from = command.checkpoint;
  SPW_ASSIGN_OR_RETURN(TrainSettings settings, train_settings_from(job));
  settings.inference_only = true;
  // The sampler reads the logits, which a chunked head does not keep; one window's logits
  // are small.
  settings.model.gpt.head_chunk_rows = 0;
  ThreadRequest threads;
  threads.threads = job.threads.count;
  SPW_TRY(setup_threads(threads).status());
  std::vector<std::int32_t> prompt_ids;
  if (!command.prompt_ids.empty()) {
    SPW_ASSIGN_OR_RETURN(prompt_ids, parse_token_ids(command.prompt_ids));
  }
  SPW_ASSIGN_OR_RETURN(auto trainer, Trainer::create(settings));
  if (!prompt_ids.empty()) {
    SPW_ASSIGN_OR_RETURN(const std::vector<std::int32_t> ids,
                         sample_tokens(*trainer, prompt_ids, command.settings));
    std::string line;
    for (std::int32_t id : prompt_ids) line += std::to_string(id) + ' ';
    for (std::int32_t id : ids) line += std::to_string(id) + ' ';
    line.back() = '\n';
    std::fputs(line.c_str(), stdout);
    return Status::success();
  }
  SPW_ASSIGN_OR_RETURN(const std::string text, sample_text(*trainer, command.settings));
  std::fwrite(command.settings.prompt.data(), 1, command.settings.prompt.size(), stdout);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  return Status::success();
}

}  // namespace spw
