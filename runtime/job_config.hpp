// JobConfig: what a TOML job file asks spillway to do, checked and with every default filled in.
// Job files are the only user-facing way to describe a run, so every mistake in one must come back
// as a single config_error line that names the file, the line and the key; nothing downstream
// re-validates these values.
#pragma once

#include <cstddef>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/status.hpp"
#include "runtime/lr_schedule.hpp"

namespace spw {

enum class ModelKind { gpt, mlp };
enum class DataKind { text, tokens, fashion_mnist, synthetic };
enum class OptimizerKind { sgd, adamw };
enum class ScheduleKind { gpipe, one_f_one_b, interleaved, zb_h1 };
// `auto` is a keyword, hence `automatic` for the job file's "auto".
enum class Layout { automatic, classic, pipefb };
// automatic ("auto"): the planner chooses the tier, keep and lookahead for its plan (none
// when every rank fits the cap without); needs parallel.stages = "auto". The executor is
// only ever given the tier the plan chose.
enum class OffloadTier { none, host, file, peer, automatic };

// A stream of token ids that data.holdout splits and a gpt trains on: text or a token file.
inline bool is_token_corpus(DataKind source) {
  return source == DataKind::text || source == DataKind::tokens;
}

// The spelling used in job files and report.json ("fashion-mnist", "1f1b", "zb-h1", "auto").
std::string_view to_string(ModelKind kind);
std::string_view to_string(DataKind source);
std::string_view to_string(OptimizerKind kind);
std::string_view to_string(LrDecay decay);
std::string_view to_string(ScheduleKind schedule);
std::string_view to_string(Layout layout);
std::string_view to_string(OffloadTier tier);

struct ModelConfig {
  ModelKind kind = ModelKind::gpt;
  // gpt only.
  int layers = 8;
  int d_model = 256;
  int heads = 8;
  int seq = 128;
  // Token ids run from 0 to vocab - 1: 256 for text (a token a byte), whatever the tokenizer
  // gave for a token file.
  int vocab = 256;
  double ln_eps = 1e-5;
  // 0: the head keeps each microbatch's logits; N: computes them N rows at a time and its
  // gradient in its forward (GptShape::head_chunk_rows). Not with parallel.layout = "pipefb".
  int head_chunk_rows = 0;
  // head_chunk_rows = "auto": the planner plans the head whole and chunked
  // (kAutoHeadChunkRows) and keeps the faster plan that fits memory.cap; needs
  // parallel.stages = "auto" and a layout that may be classic.
  bool head_chunk_auto = false;
  // [layer, front heads] pairs, by layer: each such layer becomes two blocks, LN1 with its
  // first heads, then the rest, so that a stage boundary can fall between them.
  std::vector<std::array<int, 2>> split_layers;
  // split_layers = "auto": the planner cuts layers where its stage boundaries fall inside
  // them (partition/planner_layer_split.hpp); needs parallel.stages = "auto".
  bool split_layers_auto = false;
  // mlp only: layer widths, input first, output last.
  std::vector<int> dims;
  bool operator==(const ModelConfig&) const = default;
};

struct DataConfig {
  DataKind source = DataKind::text;
  // Filled in with the source's Debian package location when the job leaves it empty
  // (empty stays empty for synthetic data).
  std::string path;
  // Text and token files: the fraction of the corpus, from its end, kept out of training for
  // evaluation (eval.every); 0 trains on all of it.
  double holdout = 0.0;
  // Token files only: bytes an id, 2 (uint16, as nanoGPT's train.bin) or 4 (uint32).
  int token_bytes = 2;
  bool operator==(const DataConfig&) const = default;
};

// The loss on data training never sees, every `every` steps and after the last step: the
// held-out end of a text corpus or token file (data.holdout), Fashion-MNIST's t10k, or for
// synthetic data samples of steps no run reaches. Each evaluation runs `batches` batches of
// train.batch samples, the same ones every time, so evaluations of one run (or of two runs on the
// same data) compare.
struct EvalConfig {
  std::int64_t every = 0;  // 0: never
  int batches = 4;
  bool operator==(const EvalConfig&) const = default;

  // Whether the run evaluates after step `step` of `total`.
  bool after(std::int64_t step, std::int64_t total) const {
    return every > 0 && (step % every == 0 || step == total);
  }
};

struct TrainConfig {
  int batch = 16;
  int microbatches = 1;  // divides batch
  // Exactly one is set.
  std::optional<std::int64_t> steps;
  std::optional<std::int64_t> epochs;
  OptimizerKind optimizer = OptimizerKind::adamw;
  double lr = 1e-3;
  double momentum = 0.0;  // sgd
  double beta1 = 0.9;     // adamw
  double beta2 = 0.999;   // adamw
  double eps = 1e-8;      // adamw
  double weight_decay = 0.0;
  std::uint64_t seed = 1234;
  std::string init_from;  // checkpoint to start from; empty: fresh initialisation
  // The learning rate: lr is its peak (runtime/lr_schedule.hpp has the formulas).
  LrDecay lr_decay = LrDecay::constant;       // "constant", "cosine" or "linear"
  std::int64_t warmup_steps = 0;              // linear from lr / warmup_steps up to lr
  std::optional<std::int64_t> decay_steps;    // where the decay reaches min_lr; unset: last step
  double min_lr = 0.0;                        // the decay's floor, <= lr
  // The largest global L2 norm of the gradients a step applies (runtime/grad_clip.hpp);
  // 0: no clipping.
  double clip_grad_norm = 0.0;
  bool operator==(const TrainConfig&) const = default;
};

// An inclusive range of model blocks that one pipeline stage owns.
struct StageRange {
  int first = 0;
  int last = 0;
  bool operator==(const StageRange&) const = default;
};

// parallel.stages: "auto" (the planner chooses), a stage count, or explicit block ranges.
// Ranges are checked to start at block 0 and to be contiguous; whether the last one ends at the
// model's last block is for the partitioner, which knows how the model is cut into blocks.
struct StagesSpec {
  enum class Form { automatic, count, ranges };
  Form form = Form::automatic;
  int count = 0;                    // form == count
  std::vector<StageRange> ranges;   // form == ranges, in block order
  bool operator==(const StagesSpec&) const = default;
};

struct ParallelConfig {
  StagesSpec stages;
  int replicas = 1;
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  int chunks = 1;
  Layout layout = Layout::automatic;
  bool operator==(const ParallelConfig&) const = default;
};

// offload.engine_pu besides a PU's OS index: "auto" (a PU of the rank's own the compute
// threads leave free, runtime/engine_binding.hpp) and "none" (the engine thread unbound).
inline constexpr int kEnginePuAuto = -2;
inline constexpr int kEnginePuNone = -1;

struct OffloadConfig {
  OffloadTier tier = OffloadTier::none;
  int keep = 1;
  int lookahead = 1;
  bool verify = false;
  std::string dir;  // empty: the runtime picks a place
  int engine_pu = kEnginePuAuto;
  bool operator==(const OffloadConfig&) const = default;
};

struct MemoryConfig {
  std::optional<std::size_t> cap;  // bytes per rank; nullopt: no cap
  bool operator==(const MemoryConfig&) const = default;
};

struct OutputConfig {
  std::string dir = "spillway-out";
  std::int64_t checkpoint_every = 0;  // steps; 0: never
  // Keep the checkpoint with the lowest eval loss as dir/best.h5 (runtime/best_checkpoint.hpp);
  // needs eval.every.
  bool keep_best = false;
  bool trace = true;
  bool operator==(const OutputConfig&) const = default;
};

struct ThreadsConfig {
  int count = 0;  // 0: leave OpenMP's default
  bool operator==(const ThreadsConfig&) const = default;
};

struct JobConfig {
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  EvalConfig eval;
  ParallelConfig parallel;
  OffloadConfig offload;
  MemoryConfig memory;
  OutputConfig output;
  ThreadsConfig threads;
  bool operator==(const JobConfig&) const = default;
};

// Reads and checks a job file. `overrides` are --set arguments, "section.key=value" with the value
// written as TOML (a bare word that is not TOML is taken as a string); they replace or add keys
// before anything is checked. A missing file is not_found, an unreadable one io_error.
Result<JobConfig> load_job_file(const std::string& path, const std::vector<std::string>& overrides);

// A job file's text, unchecked, with the errors load_job_file gives for a file it cannot read.
Result<std::string> read_job_file(const std::string& path);

// The same for job text already in memory; `source_name` is what error messages call it, and
// `override_label` what they call an override ("--set train.lr=x: ..." on the command line,
// "spw_job_set train.lr=x: ..." through the C ABI).
Result<JobConfig> parse_job_string(std::string_view toml_text, const std::string& source_name,
                                   const std::vector<std::string>& overrides,
                                   std::string_view override_label = "--set");

// What parse_job_string checks of one override on its own (the section.key=value form, a
// known key, a well-formed TOML value), so a caller that collects overrides one at a time
// hears about a typo at once; values are range-checked only when the whole job is parsed.
Status check_override(const std::string& argument, std::string_view override_label);

// The resolved config, shaped like the job file (sections, keys, job-file spellings) so a report
// can be turned back into a job. Unset optionals (train.steps or train.epochs, memory.cap) are
// left out because TOML has no null.
nlohmann::json to_json(const JobConfig& config);

}  // namespace spw
