#include "partition/profile.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "kernels/atomic_file.hpp"

namespace spw::sched {

namespace {

using nlohmann::json;

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

Status bad(const std::string& message) { return error(StatusCode::invalid_argument, message); }

Status check_seconds(const std::string& where, const char* key, double value) {
  if (!std::isfinite(value) || value < 0)
    return bad(where + key + " = " + number(value) + " must be a finite number of seconds >= 0");
  return Status::success();
}

Status check_bytes(const std::string& where, const char* key, std::int64_t value) {
  if (value < 0) return bad(where + key + " = " + std::to_string(value) + " must be >= 0");
  return Status::success();
}

// nlohmann's accessors throw on a wrong type; these check first so nothing escapes.
Result<const json*> member(const json& object, const char* key, const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end())
    return error(StatusCode::not_found, where + "missing key \"" + key + "\"");
  return &*it;
}

Result<double> get_number(const json& object, const char* key, const std::string& where) {
  SPW_ASSIGN_OR_RETURN(const json* value, member(object, key, where));
  if (!value->is_number())
    return bad(where + "\"" + key + "\" must be a number, got " + value->dump());
  return value->get<double>();
}

Result<std::int64_t> get_integer(const json& object, const char* key, const std::string& where) {
  SPW_ASSIGN_OR_RETURN(const json* value, member(object, key, where));
  if (!value->is_number_integer())
    return bad(where + "\"" + key + "\" must be an integer, got " + value->dump());
  return value->get<std::int64_t>();
}

Result<std::string> get_string(const json& object, const char* key, const std::string& where) {
  SPW_ASSIGN_OR_RETURN(const json* value, member(object, key, where));
  if (!value->is_string())
    return bad(where + "\"" + key + "\" must be a string, got " + value->dump());
  return value->get<std::string>();
}

Result<BlockProfile> block_from_json(const json& object, const std::string& where) {
  if (!object.is_object()) return bad(where + "must be an object, got " + object.dump());
  BlockProfile b;
  SPW_ASSIGN_OR_RETURN(b.name, get_string(object, "name", where));
  SPW_ASSIGN_OR_RETURN(b.forward_s, get_number(object, "forward_s", where));
  SPW_ASSIGN_OR_RETURN(b.backward_input_s, get_number(object, "backward_input_s", where));
  SPW_ASSIGN_OR_RETURN(b.backward_weight_s, get_number(object, "backward_weight_s", where));
  SPW_ASSIGN_OR_RETURN(b.stash_bytes, get_integer(object, "stash_bytes", where));
  SPW_ASSIGN_OR_RETURN(b.backward_bytes, get_integer(object, "backward_bytes", where));
  SPW_ASSIGN_OR_RETURN(b.activation_bytes, get_integer(object, "activation_bytes", where));
  SPW_ASSIGN_OR_RETURN(b.workspace_bytes, get_integer(object, "workspace_bytes", where));
  SPW_ASSIGN_OR_RETURN(b.scratch_bytes, get_integer(object, "scratch_bytes", where));
  if (object.contains("scratch_growth_bytes")) {
    SPW_ASSIGN_OR_RETURN(b.scratch_growth_bytes,
                         get_integer(object, "scratch_growth_bytes", where));
  }
  if (object.contains("bounded_workspace")) {
    const json& bounded = object.at("bounded_workspace");
    const std::string inner = where + "bounded_workspace ";
    if (!bounded.is_object()) return bad(inner + "must be an object, got " + bounded.dump());
    SPW_ASSIGN_OR_RETURN(b.bounded_workspace_per_sample,
                         get_integer(bounded, "per_sample_bytes", inner));
    SPW_ASSIGN_OR_RETURN(b.bounded_workspace_most, get_integer(bounded, "most_bytes", inner));
  }
  if (object.contains("one_sample")) {
    const json& one = object.at("one_sample");
    const std::string inner = where + "one_sample ";
    if (!one.is_object()) return bad(inner + "must be an object, got " + one.dump());
    PassSeconds t;
    SPW_ASSIGN_OR_RETURN(t.forward_s, get_number(one, "forward_s", inner));
    SPW_ASSIGN_OR_RETURN(t.backward_input_s, get_number(one, "backward_input_s", inner));
    SPW_ASSIGN_OR_RETURN(t.backward_weight_s, get_number(one, "backward_weight_s", inner));
    b.one_sample = t;
  }
  SPW_ASSIGN_OR_RETURN(b.parameter_bytes, get_integer(object, "parameter_bytes", where));
  SPW_ASSIGN_OR_RETURN(b.gradient_bytes, get_integer(object, "gradient_bytes", where));
  SPW_ASSIGN_OR_RETURN(b.optimizer_state_bytes,
                       get_integer(object, "optimizer_state_bytes", where));
  return b;
}

}  // namespace

std::int64_t bounded_workspace_bytes(const BlockProfile& block, std::int64_t samples) {
  return std::min(block.bounded_workspace_per_sample * samples, block.bounded_workspace_most);
}

Status check_profile(const ModelProfile& profile) {
  if (profile.blocks.empty()) return bad("profile: no blocks; a model needs at least one");
  if (profile.microbatch_samples < 1)
    return bad("profile: microbatch_samples = " + std::to_string(profile.microbatch_samples) +
               " must be >= 1 (the samples each measured pass processed)");
  if (profile.threads < 1)
    return bad("profile: threads = " + std::to_string(profile.threads) + " must be >= 1");
  SPW_TRY(check_seconds("profile: ", "optimizer_step_s", profile.optimizer_step_s));
  for (std::size_t i = 0; i < profile.blocks.size(); ++i) {
    const BlockProfile& b = profile.blocks[i];
    const std::string where = "profile: block " + std::to_string(i) + " (" + b.name + ") ";
    SPW_TRY(check_seconds(where, "forward_s", b.forward_s));
    SPW_TRY(check_seconds(where, "backward_input_s", b.backward_input_s));
    SPW_TRY(check_seconds(where, "backward_weight_s", b.backward_weight_s));
    if (b.one_sample) {
      const std::string inner = where + "one_sample ";
      SPW_TRY(check_seconds(inner, "forward_s", b.one_sample->forward_s));
      SPW_TRY(check_seconds(inner, "backward_input_s", b.one_sample->backward_input_s));
      SPW_TRY(check_seconds(inner, "backward_weight_s", b.one_sample->backward_weight_s));
    }
    SPW_TRY(check_bytes(where, "stash_bytes", b.stash_bytes));
    SPW_TRY(check_bytes(where, "backward_bytes", b.backward_bytes));
    SPW_TRY(check_bytes(where, "activation_bytes", b.activation_bytes));
    SPW_TRY(check_bytes(where, "workspace_bytes", b.workspace_bytes));
    SPW_TRY(check_bytes(where, "scratch_bytes", b.scratch_bytes));
    if (b.scratch_growth_bytes)
      SPW_TRY(check_bytes(where, "scratch_growth_bytes", *b.scratch_growth_bytes));
    SPW_TRY(
        check_bytes(where, "bounded_workspace per_sample_bytes", b.bounded_workspace_per_sample));
    SPW_TRY(check_bytes(where, "bounded_workspace most_bytes", b.bounded_workspace_most));
    const std::int64_t bounded = bounded_workspace_bytes(b, profile.microbatch_samples);
    if (bounded > b.workspace_bytes)
      return bad(where + "bounded_workspace holds " + std::to_string(bounded) +
                 " bytes on the profiled microbatch, more than its workspace_bytes = " +
                 std::to_string(b.workspace_bytes));
    SPW_TRY(check_bytes(where, "parameter_bytes", b.parameter_bytes));
    SPW_TRY(check_bytes(where, "gradient_bytes", b.gradient_bytes));
    SPW_TRY(check_bytes(where, "optimizer_state_bytes", b.optimizer_state_bytes));
  }
  return Status::success();
}

std::string measured_with(const ModelProfile& profile) {
  std::string text = std::to_string(profile.threads) + " thread(s)";
  if (!profile.blas_kernels.empty()) text += " with BLIS's " + profile.blas_kernels + " kernels";
  if (!profile.host.empty()) text += " on " + profile.host;
  return text;
}

Status check_profile_matches(const ModelProfile& profile, const std::string& model,
                             const std::vector<std::string>& block_names,
                             std::int64_t microbatch_samples, const std::string& source) {
  const std::string remedy =
      ": profile this job with `spillway profile CONFIG` or omit the profile";
  if (profile.model != model)
    return bad(source + " was made for the model \"" + profile.model + "\", not the job's \"" +
               model + "\"" + remedy);
  if (profile.blocks.size() != block_names.size())
    return bad(source + " has " + std::to_string(profile.blocks.size()) +
               " blocks but the job's model has " + std::to_string(block_names.size()) + remedy);
  for (std::size_t i = 0; i < block_names.size(); ++i)
    if (profile.blocks[i].name != block_names[i])
      return bad(source + " names block " + std::to_string(i) + " \"" + profile.blocks[i].name +
                 "\" but the job's model calls it \"" + block_names[i] + "\"" + remedy);
  if (profile.microbatch_samples != microbatch_samples)
    return bad(source + " was measured on microbatches of " +
               std::to_string(profile.microbatch_samples) + " samples, the job's are " +
               std::to_string(microbatch_samples) + " (train.batch / train.microbatches)" + remedy);
  return Status::success();
}

namespace {

double median_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace

Result<ModelProfile> median_profile(const std::vector<ModelProfile>& measured) {
  if (measured.empty()) return bad("median profile: no profiles to combine");
  for (const ModelProfile& p : measured) SPW_TRY(check_profile(p));
  ModelProfile out = measured.front();
  for (std::size_t k = 1; k < measured.size(); ++k) {
    const ModelProfile& p = measured[k];
    const std::string which = "median profile: profile " + std::to_string(k) + " ";
    if (p.model != out.model || p.microbatch_samples != out.microbatch_samples ||
        p.blocks.size() != out.blocks.size())
      return bad(which + "differs from profile 0 in its model, microbatch or blocks");
    for (std::size_t i = 0; i < out.blocks.size(); ++i) {
      const BlockProfile &a = out.blocks[i], &b = p.blocks[i];
      if (a.name != b.name || a.stash_bytes != b.stash_bytes ||
          a.backward_bytes != b.backward_bytes || a.workspace_bytes != b.workspace_bytes ||
          a.activation_bytes != b.activation_bytes || a.parameter_bytes != b.parameter_bytes ||
          a.gradient_bytes != b.gradient_bytes ||
          a.optimizer_state_bytes != b.optimizer_state_bytes ||
          a.bounded_workspace_per_sample != b.bounded_workspace_per_sample ||
          a.bounded_workspace_most != b.bounded_workspace_most)
        return bad(which + "differs from profile 0 in block " + std::to_string(i) + " (" + a.name +
                   ") beyond its times");
    }
  }
  const auto median_over = [&](auto field) {
    std::vector<double> values;
    for (const ModelProfile& p : measured) values.push_back(field(p));
    return median_of(std::move(values));
  };
  out.optimizer_step_s = median_over([](const ModelProfile& p) { return p.optimizer_step_s; });
  for (std::size_t i = 0; i < out.blocks.size(); ++i) {
    BlockProfile& b = out.blocks[i];
    b.forward_s = median_over([i](const ModelProfile& p) { return p.blocks[i].forward_s; });
    b.backward_input_s =
        median_over([i](const ModelProfile& p) { return p.blocks[i].backward_input_s; });
    b.backward_weight_s =
        median_over([i](const ModelProfile& p) { return p.blocks[i].backward_weight_s; });
    // Every rank measured on one sample, or the profile has no such times.
    const bool all_one_sample = std::all_of(measured.begin(), measured.end(),
                                            [i](const ModelProfile& p) {
                                              return p.blocks[i].one_sample.has_value();
                                            });
    if (all_one_sample) {
      const auto one = [i](const ModelProfile& p) { return *p.blocks[i].one_sample; };
      b.one_sample = PassSeconds{
          median_over([&](const ModelProfile& p) { return one(p).forward_s; }),
          median_over([&](const ModelProfile& p) { return one(p).backward_input_s; }),
          median_over([&](const ModelProfile& p) { return one(p).backward_weight_s; })};
    } else {
      b.one_sample = std::nullopt;
    }
    // Scratch includes kernels' process-wide buffers, which each rank grew on its own.
    for (const ModelProfile& p : measured) {
      b.scratch_bytes = std::max(b.scratch_bytes, p.blocks[i].scratch_bytes);
      const auto& growth = p.blocks[i].scratch_growth_bytes;
      // A rank that did not measure the growth makes it unknown (all of scratch grows).
      if (!growth) {
        b.scratch_growth_bytes = std::nullopt;
      } else if (b.scratch_growth_bytes) {
        b.scratch_growth_bytes = std::max(*b.scratch_growth_bytes, *growth);
      }
    }
  }
  return out;
}

std::string profile_to_json(const ModelProfile& profile) {
  json blocks = json::array();
  for (const BlockProfile& b : profile.blocks) {
    blocks.push_back({{"name", b.name},
                      {"forward_s", b.forward_s},
                      {"backward_input_s", b.backward_input_s},
                      {"backward_weight_s", b.backward_weight_s},
                      {"stash_bytes", b.stash_bytes},
                      {"backward_bytes", b.backward_bytes},
                      {"activation_bytes", b.activation_bytes},
                      {"workspace_bytes", b.workspace_bytes},
                      {"scratch_bytes", b.scratch_bytes},
                      {"parameter_bytes", b.parameter_bytes},
                      {"gradient_bytes", b.gradient_bytes},
                      {"optimizer_state_bytes", b.optimizer_state_bytes}});
    if (b.scratch_growth_bytes) blocks.back()["scratch_growth_bytes"] = *b.scratch_growth_bytes;
    if (b.bounded_workspace_most > 0) {
      blocks.back()["bounded_workspace"] = {{"per_sample_bytes", b.bounded_workspace_per_sample},
                                            {"most_bytes", b.bounded_workspace_most}};
    }
    if (b.one_sample) {
      blocks.back()["one_sample"] = {{"forward_s", b.one_sample->forward_s},
                                     {"backward_input_s", b.one_sample->backward_input_s},
                                     {"backward_weight_s", b.one_sample->backward_weight_s}};
    }
  }
  const json out = {{"version", kProfileVersion},
                    {"model", profile.model},
                    {"microbatch_samples", profile.microbatch_samples},
                    {"threads", profile.threads},
                    {"host", profile.host},
                    {"blas_kernels", profile.blas_kernels},
                    {"optimizer_step_s", profile.optimizer_step_s},
                    {"blocks", std::move(blocks)}};
  return out.dump(2) + "\n";
}

Result<ModelProfile> profile_from_json(std::string_view text, const std::string& source) {
  const json root = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return bad(source + ": not valid JSON");
  if (!root.is_object()) return bad(source + ": the top level must be an object");
  const std::string where = source + ": ";
  std::int64_t version = 1;
  if (root.contains("version")) {
    SPW_ASSIGN_OR_RETURN(version, get_integer(root, "version", where));
  }
  if (version < kProfileVersion)
    return bad(where + "profile version " + std::to_string(version) +
               (root.contains("version") ? "" : " (no \"version\" key)") +
               " lacks the backward, workspace and scratch bytes the memory model needs; "
               "run `spillway profile` again to write version " +
               std::to_string(kProfileVersion));
  if (version > kProfileVersion)
    return bad(where + "profile version " + std::to_string(version) +
               " is newer than this spillway reads (" + std::to_string(kProfileVersion) +
               "); profile again with this version");
  ModelProfile profile;
  if (root.contains("model")) {
    SPW_ASSIGN_OR_RETURN(profile.model, get_string(root, "model", where));
  }
  SPW_ASSIGN_OR_RETURN(profile.microbatch_samples, get_integer(root, "microbatch_samples", where));
  SPW_ASSIGN_OR_RETURN(const std::int64_t threads, get_integer(root, "threads", where));
  if (threads < 1 || threads > 1 << 20)
    return bad(where + "threads = " + std::to_string(threads) + " must be in [1, 2^20]");
  profile.threads = static_cast<int>(threads);
  if (root.contains("host")) {
    SPW_ASSIGN_OR_RETURN(profile.host, get_string(root, "host", where));
  }
  if (root.contains("blas_kernels")) {
    SPW_ASSIGN_OR_RETURN(profile.blas_kernels, get_string(root, "blas_kernels", where));
  }
  if (root.contains("optimizer_step_s")) {
    SPW_ASSIGN_OR_RETURN(profile.optimizer_step_s, get_number(root, "optimizer_step_s", where));
  }
  SPW_ASSIGN_OR_RETURN(const json* blocks, member(root, "blocks", where));
  if (!blocks->is_array()) return bad(where + "\"blocks\" must be an array");
  for (std::size_t i = 0; i < blocks->size(); ++i) {
    SPW_ASSIGN_OR_RETURN(
        BlockProfile block,
        block_from_json((*blocks)[i], where + "block " + std::to_string(i) + ": "));
    profile.blocks.push_back(std::move(block));
  }
  const Status checked = check_profile(profile);
  if (!checked.ok()) return checked.with_context(source);
  return profile;
}

Result<ModelProfile> read_profile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return error(StatusCode::io_error, "cannot open profile " + path);
  std::stringstream text;
  text << in.rdbuf();
  return profile_from_json(text.str(), path);
}

Status write_profile(const std::string& path, const ModelProfile& profile) {
  SPW_TRY(check_profile(profile));
  return write_file_atomically(path, profile_to_json(profile));
}

}  // namespace spw::sched
