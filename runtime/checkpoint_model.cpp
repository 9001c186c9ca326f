#include "runtime/checkpoint_model.hpp"

#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string_view>

namespace spw {
namespace {

// The [model] keys of to_json(JobConfig) that change the function the model computes.
constexpr std::array<std::string_view, 7> kFunctionKeys = {"layers", "d_model", "heads", "seq",
                                                           "vocab",  "ln_eps",  "dims"};

std::string value_text(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_float()) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", value.get<double>());
    return text;
  }
  return value.dump();
}

}  // namespace

Status check_checkpoint_model(const std::string& path, const CheckpointMeta& meta,
                              const JobConfig& job) {
  const nlohmann::json stored = nlohmann::json::parse(meta.config_json, nullptr, false);
  if (stored.is_discarded() || !stored.is_object() || !stored.contains("model") ||
      !stored["model"].is_object()) {
    return Status::success();
  }
  const nlohmann::json& theirs = stored["model"];
  const nlohmann::json ours = to_json(job)["model"];
  std::string differences;
  std::string fix;
  auto differ = [&](std::string_view key) {
    const std::string name(key);
    const nlohmann::json& value = theirs[name];
    if (!differences.empty()) differences += "; ";
    differences.append("model.").append(name).append(" = ").append(value_text(value));
    differences.append(" there, ").append(value_text(ours[name])).append(" in the job");
    // --set takes TOML values: a string quoted, the rest as JSON writes them.
    if (!fix.empty()) fix += ' ';
    if (value.is_string()) {
      fix.append("--set 'model.").append(name).append("=\"");
      fix.append(value.get<std::string>()).append("\"'");
    } else {
      fix.append("--set model.").append(name).append("=").append(value.dump());
    }
  };
  if (theirs.contains("kind") && theirs["kind"] != ours["kind"]) {
    differ("kind");
  } else {
    for (std::string_view key : kFunctionKeys) {
      const std::string name(key);
      if (theirs.contains(name) && ours.contains(name) && theirs[name] != ours[name]) differ(key);
    }
  }
  if (differences.empty()) return Status::success();
  return error(StatusCode::shape_mismatch,
               "checkpoint " + path + " holds another model than the job's: " + differences +
                   ": give the job the checkpoint's model (" + fix + ")");
}

Result<CheckpointMeta> read_checkpoint_meta_for(const std::string& path, const JobConfig& job) {
  SPW_ASSIGN_OR_RETURN(CheckpointMeta meta, read_checkpoint_meta(path));
  SPW_TRY(check_checkpoint_model(path, meta, job));
  return meta;
}

}  // namespace spw
