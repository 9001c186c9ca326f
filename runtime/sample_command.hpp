// `spillway sample`: text from a checkpoint of a GPT, to see what it learned: bytes from a
// byte-level model, token ids from one of a token file's vocabulary.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "kernels/status.hpp"
#include "runtime/sampler.hpp"
#include "runtime/train_command.hpp"

namespace spw {

struct SampleCommand {
  std::string config_path;
  std::vector<std::string> overrides;  // --set section.key=value
  std::string checkpoint;              // --checkpoint: the parameters to sample from
  SampleSettings settings;
  // --prompt-ids: token ids separated by spaces or commas, instead of settings.prompt.
  std::string prompt_ids;
};

// Collective over `comm`: builds the job's model with the checkpoint's parameters
// (train.init_from) and rank 0 prints the prompt and its continuation to stdout: as text, or
// with prompt_ids as ids separated by spaces on one line. One process holds the whole model
// (its parameters alone); several run the job's layout as a pipeline, stages given or
// planned, each token a forward pass through it (PipelineExecutor::next_token_logits), and
// print what one process would. `scope` says, on failure, whether every rank returned the
// error (bad input is checked before any pass) or only this one.
Status run_sample_command(const SampleCommand& command, MPI_Comm comm, FailureScope& scope);

// "464 2068, 7586" -> {464, 2068, 7586}; invalid_argument naming --prompt-ids and the first
// word that is not a non-negative integer, or when there is none.
Result<std::vector<std::int32_t>> parse_token_ids(const std::string& text);

}  // namespace spw
