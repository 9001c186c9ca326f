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

namespace spw {
namespace {

template <class E>
struct Spelling {
  std::string_view name;
  E value;
};

constexpr Spelling<ModelKind> kModelKinds[] = {{"gpt", ModelKind::gpt}, {"mlp", ModelKind::mlp}};
constexpr Spelling<DataKind> kDataSources[] = {{"text", DataKind::text},
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

struct SectionSchema {
  std::string_view name;
  std::vector<std::string_view> keys;
};

const std::vector<SectionSchema>& schema() {
  static const std::vector<SectionSchema> sections = {
      {"model",
       {"kind", "layers", "d_model", "heads", "seq", "vocab", "ln_eps", "split_layers", "dims"}},
      {"data", {"source", "path"}},
      {"train",
       {"batch", "microbatches", "steps", "epochs", "optimizer", "lr", "momentum", "beta1",
        "beta2", "eps", "weight_decay", "seed", "init_from", "lr_decay", "warmup_steps",
        "decay_steps", "min_lr", "clip_grad_norm"}},
      {"parallel", {"stages", "replicas", "schedule", "chunks", "layout"}},
      {"offload", {"tier", "keep", "lookahead", "verify", "dir", "engine_pu"}},
      {"memory", {"cap"}},
      {"output", {"dir", "checkpoint_every", "trace"}},
      {"threads", {"count"}},
  };
  return sections;
}

constexpr std::string_view kGptOnlyKeys[] = {"layers", "d_model", "heads",       "seq",
                                             "vocab",  "ln_eps",  "split_layers"};

const SectionSchema* find_section(std::string_view name) {
  for (const auto& section : schema()) {
    if (section.name == name) return &section;
  }
  return nullptr;
}

bool is_known(std::string_view section, std::string_view key) {
  const SectionSchema* schema_section = find_section(section);
  return schema_section != nullptr && std::find(schema_section->keys.begin(),
                                                schema_section->keys.end(),
                                                key) != schema_section->keys.end();
}

// Optimal string alignment: a swap of neighbours ("trian") costs one edit, like a typo does.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t substitution = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + substitution});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// A third of the word may be wrong: catches "lrr" and "microbatch" without suggesting
// unrelated short keys.
bool close_enough(std::string_view typed, std::string_view known) {
  return edit_distance(typed, known) <= std::max<std::size_t>(1, typed.size() / 3);
}

// " (did you mean 'x'?)", or "" when nothing is close.
std::string did_you_mean(const std::string& candidate) {
  return candidate.empty() ? "" : " (did you mean '" + candidate + "'?)";
}

std::string nearest_section(std::string_view typed) {
  for (const auto& section : schema()) {
    if (close_enough(typed, section.name)) return std::string(section.name);
  }
  return "";
}

// Prefers a near miss inside the (nearly) right section; failing that, the same key in another
// section, since putting a key under the wrong header is the other common slip.
std::string nearest_key(std::string_view section, std::string_view key) {
  constexpr std::size_t kWrongSection = 1000;
  std::string best;
  std::size_t best_score = std::numeric_limits<std::size_t>::max();
  for (const auto& candidate : schema()) {
    const std::size_t section_distance = edit_distance(section, candidate.name);
    const bool section_close = section_distance == 0 || close_enough(section, candidate.name);
    for (std::string_view candidate_key : candidate.keys) {
      const std::size_t key_distance = edit_distance(key, candidate_key);
      std::size_t score = std::numeric_limits<std::size_t>::max();
      if (section_close && close_enough(key, candidate_key)) {
        score = section_distance + key_distance;
      } else if (key_distance == 0) {
        score = kWrongSection + section_distance;
      }
      if (score < best_score) {
        best_score = score;
        best = std::string(candidate.name) + "." + std::string(candidate_key);
      }
    }
  }
  return best;
}

std::string type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::table: return "table";
    case toml::node_type::array: return "array";
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "float";
    case toml::node_type::boolean: return "boolean";
    case toml::node_type::date: return "date";
    case toml::node_type::time: return "time";
    case toml::node_type::date_time: return "date-time";
    case toml::node_type::none: break;
  }
  return "nothing";
}

// Appends rather than writing "'" + key + "'": GCC 12 misreports that as overlapping memcpy
// (-Wrestrict) at -O3.
std::string single_quoted(std::string_view key) {
  std::string text(1, '\'');
  text.append(key).push_back('\'');
  return text;
}

std::string format_number(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

std::string trim(std::string_view text) {
  const auto begin = text.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return "";
  const auto end = text.find_last_not_of(" \t");
  return std::string(text.substr(begin, end - begin + 1));
}

// The override that last supplied each "section.key", labelled as its caller calls them
// ("--set train.lr=0.1"), so errors in overridden values name the override rather than a
// line of the file that no longer holds the value.
using Origins = std::map<std::string, std::string, std::less<>>;

enum class Bound { positive, non_negative, unit_interval };

// Typed, located reads from the parsed job: every failure is one config_error line that starts
// with where the offending value came from.
class JobReader {
 public:
  JobReader(const toml::table& doc, const std::string& source, const Origins& origins)
      : doc_(doc), source_(source), origins_(origins) {}

  // "section" or "section.key"; nullptr when the job does not set it.
  const toml::node* find(std::string_view key) const {
    const auto dot = key.find('.');
    const toml::node* section = doc_.get(key.substr(0, dot));
    if (dot == std::string_view::npos || section == nullptr) return section;
    const toml::table* table = section->as_table();
    return table != nullptr ? table->get(key.substr(dot + 1)) : nullptr;
  }

  bool is_set(std::string_view key) const { return find(key) != nullptr; }

  std::string where(std::string_view key, const toml::node* node) const {
    if (const auto origin = origins_.find(key); origin != origins_.end()) {
      return origin->second;
    }
    if (node != nullptr && node->source().begin.line > 0) {
      return source_ + ":" + std::to_string(node->source().begin.line);
    }
    return source_;
  }

  Status fail(std::string_view key, const toml::node* node, const std::string& message) const {
    return error(StatusCode::config_error, where(key, node) + ": " + message);
  }
  Status fail(std::string_view key, const std::string& message) const {
    return fail(key, find(key), message);
  }
  // For a clash between values: blames the first of `keys` that a --set supplied (the newest
  // change), else the first the file sets, never a default the user did not write.
  Status fail_at(std::initializer_list<std::string_view> keys, const std::string& message) const {
    for (std::string_view key : keys) {
      if (origins_.find(key) != origins_.end()) return fail(key, message);
    }
    for (std::string_view key : keys) {
      if (is_set(key)) return fail(key, message);
    }
    return error(StatusCode::config_error, source_ + ": " + message);
  }

  template <class Int>
  Status integer(std::string_view key, const std::string& label, const toml::node& node, Int& out,
                 std::int64_t min) const {
    const auto* value = node.as_integer();
    if (value == nullptr) {
      return fail(key, &node, single_quoted(label) + " must be an integer, got " + type_name(node));
    }
    const std::int64_t number = value->get();
    if (number < min) {
      return fail(key, &node,
                  single_quoted(label) + " must be at least " + std::to_string(min) + ", got " +
                      std::to_string(number));
    }
    if (std::cmp_greater(number, std::numeric_limits<Int>::max())) {
      return fail(key, &node,
                  single_quoted(label) + " must be at most " +
                      std::to_string(std::numeric_limits<Int>::max()) + ", got " +
                      std::to_string(number));
    }
    out = static_cast<Int>(number);
    return Status::success();
  }

  template <class Int>
  Status read_integer(std::string_view key, Int& out, std::int64_t min) const {
    const toml::node* node = find(key);
    return node != nullptr ? integer(key, std::string(key), *node, out, min) : Status::success();
  }

  template <class Int>
  Status read_optional_integer(std::string_view key, std::optional<Int>& out,
                               std::int64_t min) const {
    if (!is_set(key)) return Status::success();
    Int value{};
    SPW_TRY(read_integer(key, value, min));
    out = value;
    return Status::success();
  }

  Status read_integer_array(std::string_view key, std::vector<int>& out, std::int64_t min) const {
    const toml::node* node = find(key);
    if (node == nullptr) return Status::success();
    const toml::array* array = node->as_array();
    if (array == nullptr) {
      return fail(key, node,
                  single_quoted(key) + " must be an array of integers, got " + type_name(*node));
    }
    out.clear();
    for (std::size_t i = 0; i < array->size(); ++i) {
      int value = 0;
      const std::string label = std::string(key) + "[" + std::to_string(i) + "]";
      SPW_TRY(integer(key, label, *array->get(i), value, min));
      out.push_back(value);
    }
    return Status::success();
  }

  // TOML writes `lr = 1` as an integer; a number is what is meant, so integers are accepted.
  Status read_number(std::string_view key, double& out, Bound bound) const {
    const toml::node* node = find(key);
    if (node == nullptr) return Status::success();
    double value = 0;
    if (const auto* floating = node->as_floating_point()) {
      value = floating->get();
    } else if (const auto* integral = node->as_integer()) {
      value = static_cast<double>(integral->get());
    } else {
      return fail(key, node, single_quoted(key) + " must be a number, got " + type_name(*node));
    }
    // Written so that NaN fails every bound.
    bool in_range = std::isfinite(value);
    const char* requirement = "";
    switch (bound) {
      case Bound::positive:
        in_range = in_range && value > 0;
        requirement = "greater than 0";
        break;
      case Bound::non_negative:
        in_range = in_range && value >= 0;
        requirement = "at least 0";
        break;
      case Bound::unit_interval:
        in_range = in_range && value >= 0 && value < 1;
        requirement = "in [0, 1)";
        break;
    }
    if (!in_range) {
      return fail(key, node,
                  single_quoted(key) + " must be " + requirement + ", got " + format_number(value));
    }
    out = value;
    return Status::success();
  }

  Status read_bool(std::string_view key, bool& out) const {
    const toml::node* node = find(key);
    if (node == nullptr) return Status::success();
    const auto* value = node->as_boolean();
    if (value == nullptr) {
      return fail(key, node, single_quoted(key) + " must be true or false, got " + type_name(*node));
    }
    out = value->get();
    return Status::success();
  }

  Status read_string(std::string_view key, std::string& out) const {
    const toml::node* node = find(key);
    if (node == nullptr) return Status::success();
    const auto* value = node->as_string();
    if (value == nullptr) {
      return fail(key, node, single_quoted(key) + " must be a string, got " + type_name(*node));
    }
    out = value->get();
    return Status::success();
  }

  template <class E, std::size_t N>
  Status read_enum(std::string_view key, const Spelling<E> (&options)[N], E& out) const {
    const toml::node* node = find(key);
    if (node == nullptr) return Status::success();
    const auto* value = node->as_string();
    if (value != nullptr) {
      for (const auto& option : options) {
        if (option.name == value->get()) {
          out = option.value;
          return Status::success();
        }
      }
    }
    std::string allowed;
    for (std::size_t i = 0; i < N; ++i) {
      if (i > 0) allowed += i + 1 == N ? " or " : ", ";
      allowed.append(1, '"').append(options[i].name).append(1, '"');
    }
    const std::string got = value != nullptr ? "\"" + value->get() + "\"" : type_name(*node);
    return fail(key, node, single_quoted(key) + " must be one of " + allowed + ", got " + got);
  }

 private:
  const toml::table& doc_;
  const std::string& source_;
  const Origins& origins_;
};

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
                 label + ": unknown key " + single_quoted(name) + did_you_mean(nearest_key(section, key)));
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
  if (model.vocab != 256) {
    return r.fail("model.vocab", "'model.vocab' must be 256 (tokens are bytes), got " +
                                     std::to_string(model.vocab));
  }
  if (model.d_model % model.heads != 0) {
    return r.fail_at({"model.d_model", "model.heads"},
                     "'model.d_model' (" + std::to_string(model.d_model) +
                         ") must be divisible by 'model.heads' (" + std::to_string(model.heads) +
                         ")");
  }
  return read_split_layers(r, model);
}

Status read_data(const JobReader& r, DataConfig& data) {
  SPW_TRY(r.read_enum("data.source", kDataSources, data.source));
  SPW_TRY(r.read_string("data.path", data.path));
  if (data.path.empty() && data.source == DataKind::text) data.path = kFortunesPath;
  if (data.path.empty() && data.source == DataKind::fashion_mnist) data.path = kFashionMnistPath;
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
                    single_quoted(label) + " runs backwards: first block " + std::to_string(range.first) +
                        " is after last block " + std::to_string(range.last));
    }
    // Gaps or overlaps would leave blocks without a stage or on two stages.
    const int expected_first = parsed.ranges.empty() ? 0 : parsed.ranges.back().last + 1;
    if (range.first != expected_first) {
      return r.fail(key, &element,
                    single_quoted(label) + " must start at block " + std::to_string(expected_first) +
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

Status read_output(const JobReader& r, OutputConfig& output) {
  SPW_TRY(r.read_string("output.dir", output.dir));
  if (output.dir.empty()) return r.fail("output.dir", "'output.dir' must not be empty");
  SPW_TRY(r.read_integer("output.checkpoint_every", output.checkpoint_every, 0));
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
  SPW_TRY(read_data(reader, config.data));
  SPW_TRY(read_train(reader, config.train));
  SPW_TRY(read_parallel(reader, config.parallel));
  SPW_TRY(check_split_layers_auto(reader, config.model, config.parallel));
  SPW_TRY(read_offload(reader, config.parallel, config.offload));
  SPW_TRY(read_memory(reader, config.memory));
  SPW_TRY(read_output(reader, config.output));
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

nlohmann::json to_json(const JobConfig& config) {
  using nlohmann::json;
  json out;

  const ModelConfig& model = config.model;
  json& model_json = out["model"];
  model_json["kind"] = std::string(to_string(model.kind));
  // Only the kind's own keys, so the report re-reads as a valid job.
  if (model.kind == ModelKind::gpt) {
    model_json["layers"] = model.layers;
    model_json["d_model"] = model.d_model;
    model_json["heads"] = model.heads;
    model_json["seq"] = model.seq;
    model_json["vocab"] = model.vocab;
    model_json["ln_eps"] = model.ln_eps;
    if (model.split_layers_auto) {
      model_json["split_layers"] = "auto";
    } else if (!model.split_layers.empty()) {
      model_json["split_layers"] = model.split_layers;
    }
  } else {
    model_json["dims"] = model.dims;
  }

  out["data"] = {{"source", std::string(to_string(config.data.source))},
                 {"path", config.data.path}};

  const TrainConfig& train = config.train;
  json& train_json = out["train"];
  train_json["batch"] = train.batch;
  train_json["microbatches"] = train.microbatches;
  if (train.steps) train_json["steps"] = *train.steps;
  if (train.epochs) train_json["epochs"] = *train.epochs;
  train_json["optimizer"] = std::string(to_string(train.optimizer));
  train_json["lr"] = train.lr;
  train_json["momentum"] = train.momentum;
  train_json["beta1"] = train.beta1;
  train_json["beta2"] = train.beta2;
  train_json["eps"] = train.eps;
  train_json["weight_decay"] = train.weight_decay;
  train_json["seed"] = train.seed;
  train_json["init_from"] = train.init_from;
  train_json["lr_decay"] = std::string(to_string(train.lr_decay));
  train_json["warmup_steps"] = train.warmup_steps;
  if (train.decay_steps) train_json["decay_steps"] = *train.decay_steps;
  train_json["min_lr"] = train.min_lr;
  train_json["clip_grad_norm"] = train.clip_grad_norm;

  const ParallelConfig& parallel = config.parallel;
  json& parallel_json = out["parallel"];
  switch (parallel.stages.form) {
    case StagesSpec::Form::automatic: parallel_json["stages"] = "auto"; break;
    case StagesSpec::Form::count: parallel_json["stages"] = parallel.stages.count; break;
    case StagesSpec::Form::ranges: {
      json ranges = json::array();
      for (const StageRange& range : parallel.stages.ranges) {
        ranges.push_back(json::array({range.first, range.last}));
      }
      parallel_json["stages"] = std::move(ranges);
      break;
    }
  }
  parallel_json["replicas"] = parallel.replicas;
  parallel_json["schedule"] = std::string(to_string(parallel.schedule));
  parallel_json["chunks"] = parallel.chunks;
  parallel_json["layout"] = std::string(to_string(parallel.layout));

  const OffloadConfig& offload = config.offload;
  out["offload"] = {{"tier", std::string(to_string(offload.tier))},
                    {"keep", offload.keep},
                    {"lookahead", offload.lookahead},
                    {"verify", offload.verify},
                    {"dir", offload.dir}};
  if (offload.engine_pu == kEnginePuAuto || offload.engine_pu == kEnginePuNone) {
    out["offload"]["engine_pu"] = offload.engine_pu == kEnginePuAuto ? "auto" : "none";
  } else {
    out["offload"]["engine_pu"] = offload.engine_pu;
  }

  out["memory"] = json::object();
  if (config.memory.cap) out["memory"]["cap"] = *config.memory.cap;

  out["output"] = {{"dir", config.output.dir},
                   {"checkpoint_every", config.output.checkpoint_every},
                   {"trace", config.output.trace}};
  out["threads"] = {{"count", config.threads.count}};
  return out;
}

}  // namespace spw
