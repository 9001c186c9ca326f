#include "runtime/job_schema.hpp"

#include <algorithm>
#include <limits>

namespace spw::job_detail {
namespace {

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

}  // namespace

const std::vector<SectionSchema>& schema() {
  static const std::vector<SectionSchema> sections = {
      {"model",
       {"kind", "layers", "d_model", "heads", "seq", "vocab", "ln_eps", "head_chunk_rows",
        "split_layers", "dims"}},
      {"data", {"source", "path", "holdout", "token_bytes"}},
      {"train",
       {"batch", "microbatches", "steps", "epochs", "optimizer", "lr", "momentum", "beta1", "beta2",
        "eps", "weight_decay", "seed", "init_from", "lr_decay", "warmup_steps", "decay_steps",
        "min_lr", "clip_grad_norm"}},
      {"eval", {"every", "batches"}},
      {"parallel", {"stages", "replicas", "schedule", "chunks", "layout"}},
      {"offload", {"tier", "keep", "lookahead", "verify", "dir", "engine_pu"}},
      {"memory", {"cap"}},
      {"output", {"dir", "checkpoint_every", "keep_best", "trace"}},
      {"threads", {"count"}},
  };
  return sections;
}

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

}  // namespace spw::job_detail
