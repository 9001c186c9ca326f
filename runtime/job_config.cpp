#include "runtime/job_config.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <utility>

#include <toml++/toml.h>

#include "kernels/memory_ledger.hpp"
#include "runtime/job_reader.hpp"
#include "runtime/job_schema.hpp"

namespace spw {

using namespace job_detail;

namespace {

constexpr Spelling<ModelKind> kModelKinds[] = {{"gpt", ModelKind::gpt}, {"mlp", ModelKind::mlp}};
constexpr Spelling<DataKind> kDataSources[] = {{"text", DataKind::text},
                                               {"tokens", DataKind::tokens},
                                               {"fashion-mnist", DataKind::fashion_mnist},
                                               {"synthetic", DataKind::synthetic}};
constexpr Spelling<OptimizerKind> kOptimizers[] = {{"sgd", OptimizerKind::sgd},
                                                   {"adamw", OptimizerKind::adamw}};
constexpr Spelling<LrDecay> kLrDecays[] = {{"constant", LrDecay::constant},
                                           {"cosine", LrDecay::cosine},
                                           {"linear", LrDecay::linear}};
constexpr Spelling<ScheduleKind> kSchedules[] = {{"gpipe", ScheduleKind::gpipe},
                                             {"1f1b", ScheduleKind::one_f_one_b},
                                             {"interleaved", ScheduleKind::interleaved},
                                             {"zb-h1", ScheduleKind::zb_h1}};
constexpr Spelling<Layout> kLayouts[] = {
    {"auto", Layout::automatic}, {"classic", Layout::classic}, {"pipefb", Layout::pipefb}};
constexpr Spelling<OffloadTier> kOffloadTiers[] = {{"none", OffloadTier::none},
                                                   {"host", OffloadTier::host},
                                                   {"file", OffloadTier::file},
                                                   {"peer", OffloadTier::peer},
                                                   {"auto", OffloadTier::automatic}};

template <class E, std::size_t N>
std::string_view spelling(const Spelling<E> (&options)[N], E value) {
  for (const auto& option : options) {
    if (option.value == value) return option.name;
  }
  return "?";
}

// Where the datasets' Debian packages install them; see examples/.
constexpr const char* kFortunesPath = "/usr/share/games/fortunes";
constexpr const char* kFashionMnistPath = "/usr/share/datasets/fashion-mnist";

std::string trim(std::string_view text) {
  const auto begin = text.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return "";
  const auto end = text.find_last_not_of(" \t");
  return std::string(text.substr(begin, end - begin + 1));
}

// Reports the unknown or misplaced entry that comes first in the file.
Status check_known_keys(const toml::table& doc, const JobReader& reader) {
  Status first;
  std::uint32_t first_line = std::numeric_limits<std::uint32_t>::max();
  auto note = [&](const toml::node& node, Status status) {
    const std::uint32_t line = node.source().begin.line;
    if (first.ok() || line < first_line) {
      first = std::move(status);
      first_line = line;
    }
  };
  for (const auto& [name, node] : doc) {
    const std::string section(name.str());
    if (find_section(section) == nullptr) {
      if (node.is_table()) {
        note(node, reader.fail(section, &node,
                               "unknown section " + single_quoted(section) +
                                   did_you_mean(nearest_section(section))));
      } else {
        note(node, reader.fail(section, &node,
                               "unknown key " + single_quoted(section) + ", outside any section" +
                                   did_you_mean(nearest_key("", section))));
      }
      continue;
    }
    const toml::table* table = node.as_table();
    if (table == nullptr) {
      note(node, reader.fail(section, &node,
                             single_quoted(section) + " must be a table, got " + type_name(node)));
      continue;
    }
    for (const auto& [key_name, value] : *table) {
      const std::string key(key_name.str());
      if (!is_known(section, key)) {
        const std::string full = section + "." + key;
        note(value, reader.fail(full, &value,
                                "unknown key " + single_quoted(full) +
                                    did_you_mean(nearest_key(section, key))));
      }
    }
  }
  return first;
}

// An override's value is TOML so numbers, booleans and arrays keep their types; a bare word
// (`auto`, a path) is not TOML and is taken as the string it plainly is.
Result<toml::table> parse_override_value(const std::string& text, const std::string& label) {
  try {
    toml::table parsed = toml::parse("v = " + text, label);
    if (parsed.size() != 1 || !parsed.contains("v")) {
      return error(StatusCode::config_error, label + ": the value must be a single TOML value");
    }
    return parsed;
  } catch (const toml::parse_error& e) {
    // Quotes and brackets say the user meant TOML, so their syntax error is worth reporting.
    if (!text.empty() && std::strchr("\"'[{", text.front()) != nullptr) {
      return error(StatusCode::config_error,
                   label + ": not a valid TOML value: " + std::string(e.description()));
    }
  }
  toml::table bare;
  bare.insert("v", text);
  return bare;
}

Status apply_override(toml::table& doc, const std::string& argument, std::string_view label_prefix,
                      Origins& origins) {
  const std::string label = std::string(label_prefix) + " " + argument;
  const auto equals = argument.find('=');
  if (equals == std::string::npos) {
    return error(StatusCode::config_error, label + ": expected section.key=value");
  }
  const std::string name = trim(std::string_view(argument).substr(0, equals));
  const auto dot = name.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == name.size()) {
    return error(StatusCode::config_error,
                 label + ": expected section.key=value, e.g. train.lr=0.01" +
                     did_you_mean(nearest_key("", name)));
  }
  const std::string section = name.substr(0, dot);
  const std::string key = name.substr(dot + 1);
  if (!is_known(section, key)) {
    return error(StatusCode::config_error,
                 label + ": unknown key " + single_quoted(name) +
                     did_you_mean(nearest_key(section, key)));
  }
  SPW_ASSIGN_OR_RETURN(toml::table parsed,
                       parse_override_value(trim(std::string_view(argument).substr(equals + 1)),
                                            label));
  if (!doc.contains(section)) doc.insert(section, toml::table{});
  toml::table* table = doc.get_as<toml::table>(section);
  if (table == nullptr) {
    return error(StatusCode::config_error,
                 label + ": the job file's " + single_quoted(section) + " is not a table");
  }
  table->insert_or_assign(key, std::move(*parsed.get("v")));
  origins[name] = label;
  return Status::success();
}

// Element `label` of the array under `key` as a pair of integers of at least min0 and min1;
// `pair` names what the pair holds in the message ("[first, last] pair of block indices").
Status read_int_pair(const JobReader& r, std::string_view key, const std::string& label,
                     const toml::node& element, std::string_view pair_name, std::int64_t min0,
                     std::int64_t min1, int& first, int& second) {
  const toml::array* pair = element.as_array();
  if (pair == nullptr || pair->size() != 2) {
    return r.fail(key, &element,
                  single_quoted(label) + " must be a " + std::string(pair_name) + ", got " +
                      (pair != nullptr ? std::to_string(pair->size()) + " entries"
                                       : type_name(element)));
  }
  SPW_TRY(r.integer(key, label + "[0]", *pair->get(0), first, min0));
  return r.integer(key, label + "[1]", *pair->get(1), second, min1);
}

Status read_head_chunk_rows(const JobReader& r, ModelConfig& model) {
  constexpr std::string_view key = "model.head_chunk_rows";
  const toml::node* node = r.find(key);
  if (node == nullptr) return Status::success();
  if (const toml::value<std::string>* word = node->as_string()) {
    if (word->get() == "auto") {
      model.head_chunk_auto = true;
      return Status::success();
    }
    return r.fail(key, "'model.head_chunk_rows' must be an integer >= 0 or \"auto\", got \"" +
                           word->get() + "\"");
  }
  return r.read_integer(key, model.head_chunk_rows, 0);
}

Status read_split_layers(const JobReader& r, ModelConfig& model) {
  constexpr std::string_view key = "model.split_layers";
  const toml::node* node = r.find(key);
  if (node == nullptr) return Status::success();
  const toml::value<std::string>* word = node->as_string();
  if (word != nullptr && word->get() == "auto") {
    model.split_layers_auto = true;
    return Status::success();
  }
  const toml::array* pairs = node->as_array();
  if (pairs == nullptr) {
    return r.fail(key, "'model.split_layers' must be an array of [layer, heads] pairs or "
                       "\"auto\", got " +
                           (word != nullptr ? "\"" + word->get() + "\"" : type_name(*node)));
  }
  std::vector<std::array<int, 2>> parsed;
  for (std::size_t i = 0; i < pairs->size(); ++i) {
    const toml::node& element = *pairs->get(i);
    const std::string label = "model.split_layers[" + std::to_string(i) + "]";
    std::array<int, 2> split{};
    SPW_TRY(read_int_pair(r, key, label, element, "[layer, heads] pair", 0, 1, split[0],
                          split[1]));
    if (split[0] >= model.layers) {
      return r.fail(key, &element,
                    single_quoted(label) + " names layer " + std::to_string(split[0]) +
                        ", but the model has layers 0 .. " + std::to_string(model.layers - 1));
    }
    if (split[1] >= model.heads) {
      return r.fail(key, &element,
                    single_quoted(label) + " keeps " + std::to_string(split[1]) +
                        " heads in the front, which leaves none of the layer's " +
                        std::to_string(model.heads) + " for the back: use 1 .. " +
                        std::to_string(model.heads - 1));
    }
    for (const auto& earlier : parsed) {
      if (earlier[0] == split[0]) {
        return r.fail(key, &element,
                      single_quoted(label) + " splits layer " + std::to_string(split[0]) +
                          " a second time");
      }
    }
    parsed.push_back(split);
  }
  std::sort(parsed.begin(), parsed.end());
  model.split_layers = std::move(parsed);
  return Status::success();
}

Status read_model(const JobReader& r, ModelConfig& model) {
  SPW_TRY(r.read_enum("model.kind", kModelKinds, model.kind));
  // Keys of the other kind are refused rather than ignored: `dims` without kind = "mlp" would
  // otherwise silently train the default GPT.
  if (model.kind == ModelKind::mlp) {
    for (std::string_view key : kGptOnlyKeys) {
      const std::string full = "model." + std::string(key);
      if (r.is_set(full)) {
        return r.fail(full, single_quoted(full) + " applies only to model.kind = \"gpt\"");
      }
    }
    if (!r.is_set("model.dims")) {
      return r.fail_at({"model.kind", "model"},
                       "model.kind = \"mlp\" needs 'model.dims', e.g. [784, 1024, 10]");
    }
    SPW_TRY(r.read_integer_array("model.dims", model.dims, 1));
    if (model.dims.size() < 2) {
      return r.fail("model.dims", "'model.dims' needs at least 2 widths (input and output), got " +
                                      std::to_string(model.dims.size()));
    }
    return Status::success();
  }
  if (r.is_set("model.dims")) {
    return r.fail("model.dims", "'model.dims' applies only to model.kind = \"mlp\"");
  }
  SPW_TRY(r.read_integer("model.layers", model.layers, 1));
  SPW_TRY(r.read_integer("model.d_model", model.d_model, 1));
  SPW_TRY(r.read_integer("model.heads", model.heads, 1));
  SPW_TRY(r.read_integer("model.seq", model.seq, 1));
  SPW_TRY(r.read_integer("model.vocab", model.vocab, 1));
  SPW_TRY(r.read_number("model.ln_eps", model.ln_eps, Bound::positive));
  SPW_TRY(read_head_chunk_rows(r, model));
  if (model.d_model % model.heads != 0) {
    return r.fail_at({"model.d_model", "model.heads"},
                     "'model.d_model' (" + std::to_string(model.d_model) +
                         ") must be divisible by 'model.heads' (" + std::to_string(model.heads) +
                         ")");
  }
  return read_split_layers(r, model);
}

Status read_data(const JobReader& r, const ModelConfig& model, DataConfig& data) {
  SPW_TRY(r.read_enum("data.source", kDataSources, data.source));
  SPW_TRY(r.read_string("data.path", data.path));
  if (data.path.empty() && data.source == DataKind::text) data.path = kFortunesPath;
  if (data.path.empty() && data.source == DataKind::fashion_mnist) data.path = kFashionMnistPath;
  if (data.path.empty() && data.source == DataKind::tokens) {
    return r.fail_at({"data.path", "data.source"},
                     "data.source = \"tokens\" needs 'data.path': a file of token ids, 2 bytes "
                     "each (uint16, as nanoGPT's train.bin) or 4 with data.token_bytes = 4");
  }
  SPW_TRY(r.read_number("data.holdout", data.holdout, Bound::unit_interval));
  if (data.holdout > 0 && !is_token_corpus(data.source)) {
    return r.fail_at({"data.holdout", "data.source"},
                     "'data.holdout' splits a text corpus or token file; \"" +
                         std::string(spelling(kDataSources, data.source)) +
                         "\" data evaluates on " +
                         (data.source == DataKind::fashion_mnist ? "its t10k test set"
                                                                 : "samples training never draws") +
                         ": remove 'data.holdout'");
  }
  if (r.is_set("data.token_bytes") && data.source != DataKind::tokens) {
    return r.fail("data.token_bytes",
                  "'data.token_bytes' applies only to data.source = \"tokens\"");
  }
  SPW_TRY(r.read_integer("data.token_bytes", data.token_bytes, 2));
  if (data.token_bytes != 2 && data.token_bytes != 4) {
    return r.fail("data.token_bytes",
                  "'data.token_bytes' must be 2 (uint16 ids) or 4 (uint32 ids), got " +
                      std::to_string(data.token_bytes));
  }
  if (model.kind == ModelKind::gpt) {
    if (data.source == DataKind::text && model.vocab != 256) {
      return r.fail_at({"model.vocab", "data.source"},
                       "data.source = \"text\" gives a token a byte, so 'model.vocab' must be "
                       "256, got " +
                           std::to_string(model.vocab) +
                           ": tokenize the corpus into a token file (data.source = \"tokens\") for "
                           "another vocabulary");
    }
    if (data.source == DataKind::tokens && data.token_bytes == 2 && model.vocab > 65536) {
      return r.fail_at({"model.vocab", "data.token_bytes"},
                       "'model.vocab' " + std::to_string(model.vocab) +
                           " has ids that 2-byte tokens cannot hold: set data.token_bytes = 4");
    }
  }
  return Status::success();
}

Status read_eval(const JobReader& r, const DataConfig& data, EvalConfig& eval) {
  SPW_TRY(r.read_integer("eval.every", eval.every, 0));
  SPW_TRY(r.read_integer("eval.batches", eval.batches, 1));
  if (eval.every > 0 && is_token_corpus(data.source) && data.holdout == 0) {
    return r.fail_at({"eval.every", "data.holdout"},
                     std::string("'eval.every' evaluates on held-out ") +
                         (data.source == DataKind::text ? "text" : "tokens") +
                         ", but 'data.holdout' is 0: set it to the fraction of the corpus to "
                         "keep out of training (0.05 keeps the last 5%)");
  }
  return Status::success();
}

Status read_lr_schedule(const JobReader& r, TrainConfig& train) {
  SPW_TRY(r.read_enum("train.lr_decay", kLrDecays, train.lr_decay));
  SPW_TRY(r.read_integer("train.warmup_steps", train.warmup_steps, 0));
  SPW_TRY(r.read_optional_integer("train.decay_steps", train.decay_steps, 1));
  SPW_TRY(r.read_number("train.min_lr", train.min_lr, Bound::non_negative));
  if (train.min_lr > train.lr) {
    return r.fail_at({"train.min_lr", "train.lr"},
                     "'train.min_lr' (" + format_number(train.min_lr) +
                         ") must not exceed 'train.lr' (" + format_number(train.lr) + ")");
  }
  // Either would do nothing without a decay: most likely the decay was forgotten.
  if (train.lr_decay == LrDecay::constant && (train.decay_steps || train.min_lr > 0)) {
    const char* idle_key = train.decay_steps ? "train.decay_steps" : "train.min_lr";
    return r.fail_at({"train.lr_decay", idle_key},
                     std::string("'") + idle_key +
                         "' needs a decay: set 'train.lr_decay' to \"cosine\" or \"linear\"");
  }
  if (train.decay_steps && *train.decay_steps <= train.warmup_steps) {
    return r.fail_at({"train.decay_steps", "train.warmup_steps"},
                     "'train.decay_steps' (" + std::to_string(*train.decay_steps) +
                         ") must exceed 'train.warmup_steps' (" +
                         std::to_string(train.warmup_steps) + "): the decay starts after it");
  }
  return Status::success();
}

Status read_train(const JobReader& r, TrainConfig& train) {
  SPW_TRY(r.read_integer("train.batch", train.batch, 1));
  SPW_TRY(r.read_integer("train.microbatches", train.microbatches, 1));
  if (train.batch % train.microbatches != 0) {
    return r.fail_at({"train.microbatches", "train.batch"},
                     "'train.microbatches' (" + std::to_string(train.microbatches) +
                         ") must divide 'train.batch' (" + std::to_string(train.batch) + ")");
  }
  SPW_TRY(r.read_optional_integer("train.steps", train.steps, 1));
  SPW_TRY(r.read_optional_integer("train.epochs", train.epochs, 1));
  if (train.steps && train.epochs) {
    return r.fail_at({"train.epochs"}, "set 'train.steps' or 'train.epochs', not both");
  }
  if (!train.steps && !train.epochs) {
    return r.fail_at({"train"}, "the job needs 'train.steps' or 'train.epochs'");
  }
  SPW_TRY(r.read_enum("train.optimizer", kOptimizers, train.optimizer));
  SPW_TRY(r.read_number("train.lr", train.lr, Bound::positive));
  SPW_TRY(r.read_number("train.momentum", train.momentum, Bound::unit_interval));
  SPW_TRY(r.read_number("train.beta1", train.beta1, Bound::unit_interval));
  SPW_TRY(r.read_number("train.beta2", train.beta2, Bound::unit_interval));
  SPW_TRY(r.read_number("train.eps", train.eps, Bound::positive));
  SPW_TRY(r.read_number("train.weight_decay", train.weight_decay, Bound::non_negative));
  SPW_TRY(r.read_integer("train.seed", train.seed, 0));
  SPW_TRY(r.read_string("train.init_from", train.init_from));
  SPW_TRY(r.read_number("train.clip_grad_norm", train.clip_grad_norm, Bound::non_negative));
  return read_lr_schedule(r, train);
}

Status read_stages(const JobReader& r, StagesSpec& stages) {
  constexpr std::string_view key = "parallel.stages";
  const toml::node* node = r.find(key);
  if (node == nullptr) return Status::success();
  const std::string expected =
      "'parallel.stages' must be \"auto\", a stage count or an array of [first, last] block "
      "ranges, got ";
  if (const auto* word = node->as_string()) {
    if (word->get() != "auto") return r.fail(key, expected + "\"" + word->get() + "\"");
    stages = StagesSpec{};
    return Status::success();
  }
  if (node->is_integer()) {
    stages = StagesSpec{StagesSpec::Form::count, 0, {}};
    return r.integer(key, std::string(key), *node, stages.count, 1);
  }
  const toml::array* ranges = node->as_array();
  if (ranges == nullptr) return r.fail(key, expected + type_name(*node));
  if (ranges->empty()) return r.fail(key, "'parallel.stages' must list at least one range");
  StagesSpec parsed{StagesSpec::Form::ranges, 0, {}};
  for (std::size_t i = 0; i < ranges->size(); ++i) {
    const toml::node& element = *ranges->get(i);
    const std::string label = "parallel.stages[" + std::to_string(i) + "]";
    StageRange range;
    SPW_TRY(read_int_pair(r, key, label, element, "[first, last] pair of block indices", 0, 0,
                          range.first, range.last));
    if (range.first > range.last) {
      return r.fail(key, &element,
                    single_quoted(label) + " runs backwards: first block " +
                        std::to_string(range.first) + " is after last block " +
                        std::to_string(range.last));
    }
    // Gaps or overlaps would leave blocks without a stage or on two stages.
    const int expected_first = parsed.ranges.empty() ? 0 : parsed.ranges.back().last + 1;
    if (range.first != expected_first) {
      return r.fail(key, &element,
                    single_quoted(label) + " must start at block " +
                        std::to_string(expected_first) +
                        " (ranges cover the blocks in order, without gaps), got " +
                        std::to_string(range.first));
    }
    parsed.ranges.push_back(range);
  }
  stages = std::move(parsed);
  return Status::success();
}

Status read_parallel(const JobReader& r, ParallelConfig& parallel) {
  SPW_TRY(read_stages(r, parallel.stages));
  SPW_TRY(r.read_integer("parallel.replicas", parallel.replicas, 1));
  SPW_TRY(r.read_enum("parallel.schedule", kSchedules, parallel.schedule));
  SPW_TRY(r.read_integer("parallel.chunks", parallel.chunks, 1));
  SPW_TRY(r.read_enum("parallel.layout", kLayouts, parallel.layout));
  return Status::success();
}

Status read_engine_pu(const JobReader& r, int& engine_pu) {
  constexpr std::string_view key = "offload.engine_pu";
  const toml::node* node = r.find(key);
  if (node == nullptr) return Status::success();
  if (node->is_integer()) return r.integer(key, std::string(key), *node, engine_pu, 0);
  const auto* word = node->as_string();
  if (word != nullptr && (word->get() == "auto" || word->get() == "none")) {
    engine_pu = word->get() == "auto" ? kEnginePuAuto : kEnginePuNone;
    return Status::success();
  }
  return r.fail(key, "'offload.engine_pu' must be \"auto\", \"none\" or a PU's OS index (an "
                     "integer), got " +
                         (word != nullptr ? "\"" + word->get() + "\"" : type_name(*node)));
}

// The planner cuts layers for the stages it chooses; stages given by hand have no plan.
Status check_split_layers_auto(const JobReader& r, const ModelConfig& model,
                               const ParallelConfig& parallel) {
  if (!model.split_layers_auto || parallel.stages.form == StagesSpec::Form::automatic) {
    return Status::success();
  }
  return r.fail_at({"model.split_layers", "parallel.stages"},
                   "model.split_layers = \"auto\" lets the planner cut layers at the stage "
                   "boundaries it chooses, which needs parallel.stages = \"auto\": set "
                   "parallel.stages = \"auto\" or list the [layer, heads] pairs to split");
}

// PipeFB runs a stage's backward on another rank than its forward, and the chunked head
// leaves its weight gradient on the forward's.
Status check_head_chunks(const JobReader& r, const ModelConfig& model,
                         const ParallelConfig& parallel) {
  if (model.head_chunk_auto) {
    if (parallel.stages.form != StagesSpec::Form::automatic) {
      return r.fail_at({"model.head_chunk_rows", "parallel.stages"},
                       "model.head_chunk_rows = \"auto\" lets the planner choose whether to "
                       "chunk the head, which needs parallel.stages = \"auto\": set "
                       "parallel.stages = \"auto\" or model.head_chunk_rows to a number of rows");
    }
    if (parallel.layout == Layout::pipefb) {
      return r.fail_at({"model.head_chunk_rows", "parallel.layout"},
                       "model.head_chunk_rows = \"auto\" has nothing to choose with "
                       "parallel.layout = \"pipefb\", which needs the head whole: set "
                       "parallel.layout = \"auto\" or \"classic\", or model.head_chunk_rows = 0");
    }
    return Status::success();
  }
  if (model.head_chunk_rows == 0 || parallel.layout != Layout::pipefb) return Status::success();
  return r.fail_at({"model.head_chunk_rows", "parallel.layout"},
                   "model.head_chunk_rows computes the head's weight gradient in its forward, "
                   "and parallel.layout = \"pipefb\" runs the head's backward on another rank: "
                   "set parallel.layout = \"classic\" or \"auto\", or model.head_chunk_rows = 0");
}

Status read_offload(const JobReader& r, const ParallelConfig& parallel, OffloadConfig& offload) {
  SPW_TRY(r.read_enum("offload.tier", kOffloadTiers, offload.tier));
  // The planner chooses the offload together with the layout; for a layout given by hand
  // there is no plan to take it from.
  if (offload.tier == OffloadTier::automatic &&
      parallel.stages.form != StagesSpec::Form::automatic) {
    return r.fail_at({"offload.tier", "parallel.stages"},
                     "offload.tier = \"auto\" lets the planner choose the offload, which needs "
                     "parallel.stages = \"auto\": set parallel.stages = \"auto\" or choose a tier "
                     "(\"none\", \"file\", \"peer\" or \"host\")");
  }
  SPW_TRY(r.read_integer("offload.keep", offload.keep, 0));
  SPW_TRY(r.read_integer("offload.lookahead", offload.lookahead, 0));
  SPW_TRY(r.read_bool("offload.verify", offload.verify));
  SPW_TRY(r.read_string("offload.dir", offload.dir));
  return read_engine_pu(r, offload.engine_pu);
}

Status read_memory(const JobReader& r, MemoryConfig& memory) {
  constexpr std::string_view key = "memory.cap";
  const toml::node* node = r.find(key);
  if (node == nullptr) return Status::success();
  std::size_t bytes = 0;
  if (node->is_integer()) {
    SPW_TRY(r.integer(key, std::string(key), *node, bytes, 1));
  } else if (const auto* text = node->as_string()) {
    Result<std::size_t> parsed = parse_bytes(text->get());
    if (!parsed.ok()) return r.fail(key, "'memory.cap': " + parsed.status().message());
    bytes = *parsed;
    if (bytes == 0) {
      return r.fail(key, "'memory.cap' must be at least 1 byte, got \"" + text->get() + "\"");
    }
  } else {
    return r.fail(key,
                  "'memory.cap' must be a byte count (an integer or a string like \"8GiB\"), got " +
                      type_name(*node));
  }
  memory.cap = bytes;
  return Status::success();
}

Status read_output(const JobReader& r, const EvalConfig& eval, OutputConfig& output) {
  SPW_TRY(r.read_string("output.dir", output.dir));
  if (output.dir.empty()) return r.fail("output.dir", "'output.dir' must not be empty");
  SPW_TRY(r.read_integer("output.checkpoint_every", output.checkpoint_every, 0));
  SPW_TRY(r.read_bool("output.keep_best", output.keep_best));
  if (output.keep_best && eval.every == 0) {
    return r.fail_at({"output.keep_best", "eval.every"},
                     "'output.keep_best' keeps the checkpoint with the lowest eval loss, but "
                     "nothing evaluates: set 'eval.every'");
  }
  SPW_TRY(r.read_bool("output.trace", output.trace));
  return Status::success();
}

Result<JobConfig> parse_job(std::string_view text, const std::string& source_name,
                            const std::vector<std::string>& overrides,
                            std::string_view override_label) {
  toml::table doc;
  try {
    doc = toml::parse(text, source_name);
  } catch (const toml::parse_error& e) {
    std::string description(e.description());
    std::replace(description.begin(), description.end(), '\n', ' ');
    return error(StatusCode::config_error,
                 source_name + ":" + std::to_string(e.source().begin.line) + ":" +
                     std::to_string(e.source().begin.column) + ": TOML syntax error: " +
                     description);
  }
  Origins origins;
  for (const std::string& argument : overrides) {
    SPW_TRY(apply_override(doc, argument, override_label, origins));
  }

  const JobReader reader(doc, source_name, origins);
  SPW_TRY(check_known_keys(doc, reader));
  JobConfig config;
  SPW_TRY(read_model(reader, config.model));
  SPW_TRY(read_data(reader, config.model, config.data));
  SPW_TRY(read_train(reader, config.train));
  SPW_TRY(read_eval(reader, config.data, config.eval));
  SPW_TRY(read_parallel(reader, config.parallel));
  SPW_TRY(check_split_layers_auto(reader, config.model, config.parallel));
  SPW_TRY(check_head_chunks(reader, config.model, config.parallel));
  SPW_TRY(read_offload(reader, config.parallel, config.offload));
  SPW_TRY(read_memory(reader, config.memory));
  SPW_TRY(read_output(reader, config.eval, config.output));
  SPW_TRY(reader.read_integer("threads.count", config.threads.count, 0));
  return config;
}

}  // namespace

std::string_view to_string(ModelKind kind) { return spelling(kModelKinds, kind); }
std::string_view to_string(DataKind source) { return spelling(kDataSources, source); }
std::string_view to_string(OptimizerKind kind) { return spelling(kOptimizers, kind); }
std::string_view to_string(LrDecay decay) { return spelling(kLrDecays, decay); }
std::string_view to_string(ScheduleKind schedule) { return spelling(kSchedules, schedule); }
std::string_view to_string(Layout layout) { return spelling(kLayouts, layout); }
std::string_view to_string(OffloadTier tier) { return spelling(kOffloadTiers, tier); }

Result<JobConfig> parse_job_string(std::string_view toml_text, const std::string& source_name,
                                   const std::vector<std::string>& overrides,
                                   std::string_view override_label) {
  // toml++ throws more than parse_error (allocation failures); none of it may leave the API.
  try {
    return parse_job(toml_text, source_name, overrides, override_label);
  } catch (const std::exception& e) {
    return error(StatusCode::internal, "reading job " + source_name + ": " + e.what());
  }
}

Result<std::string> read_job_file(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (status.type() == std::filesystem::file_type::not_found) {
    return error(StatusCode::not_found, "job file '" + path + "' does not exist");
  }
  if (ec) {
    return error(StatusCode::io_error, "cannot read job file '" + path + "': " + ec.message());
  }
  if (status.type() == std::filesystem::file_type::directory) {
    return error(StatusCode::io_error, "cannot read job file '" + path + "': it is a directory");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return error(StatusCode::io_error,
                 "cannot read job file '" + path + "': " + std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return error(StatusCode::io_error, "cannot read job file '" + path + "'");
  return text.str();
}

Result<JobConfig> load_job_file(const std::string& path,
                                const std::vector<std::string>& overrides) {
  SPW_ASSIGN_OR_RETURN(const std::string text, read_job_file(path));
  return parse_job_string(text, path, overrides);
}

Status check_override(const std::string& argument, std::string_view override_label) {
  try {
    toml::table doc;
    Origins origins;
    return apply_override(doc, argument, override_label, origins);
  } catch (const std::exception& e) {
    return error(StatusCode::internal,
                 std::string(override_label) + " " + argument + ": " + e.what());
  }
}

}  // namespace spw
