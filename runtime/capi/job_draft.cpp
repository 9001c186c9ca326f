#include "runtime/capi/job_draft.hpp"

#include <algorithm>
#include <limits>

#include <toml++/toml.h>

namespace spw::capi {
namespace {

// How job errors name a setting: "spw_job_set train.lr=-1: 'train.lr' must be > 0".
constexpr const char* kSetLabel = "spw_job_set";
// What a job that does not say how long to train is checked with (see text_sets_length_).
constexpr const char* kDefaultLength = "train.steps=1";

AbiError ok() { return {}; }
AbiError bad_state(std::string message) { return {SPW_ERR_BAD_STATE, std::move(message)}; }
AbiError from_status(const Status& status) {
  if (status.ok()) return ok();
  return {to_abi(status.code()), status.message()};
}

std::string trimmed(const std::string& text) {
  const auto begin = text.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(" \t") - begin + 1);
}

std::string toml_array(const std::vector<int>& values) {
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    out += (i > 0 ? ", " : "") + std::to_string(values[i]);
  }
  return out + "]";
}

}  // namespace

Result<JobDraft> JobDraft::from_text(std::string toml_text, std::string source_name) {
  bool sets_length = false;
  try {
    const toml::table doc = toml::parse(toml_text, source_name);
    sets_length = doc["train"]["steps"] || doc["train"]["epochs"];
  } catch (const toml::parse_error&) {
    // parse_job_string reports it below, with the line and column.
  }
  const auto checked = parse_job_string(toml_text, source_name,
                                        sets_length ? std::vector<std::string>{}
                                                    : std::vector<std::string>{kDefaultLength},
                                        kSetLabel);
  if (!checked.ok()) return checked.status();
  JobDraft draft;
  draft.text_sets_length_ = sets_length;
  draft.text_ = std::move(toml_text);
  draft.source_name_ = std::move(source_name);
  return draft;
}

bool JobDraft::is_built_key(const std::string& key) {
  return key == "model.kind" || key == "model.layers" || key == "model.dims";
}

bool JobDraft::sets_key(const std::string& key) const {
  return std::any_of(overrides_.begin(), overrides_.end(), [&](const std::string& o) {
    return trimmed(o.substr(0, o.find('='))) == key;
  });
}

AbiError JobDraft::set(const std::string& key, const std::string& value) {
  const std::string name = trimmed(key);
  if (name.find('=') != std::string::npos) {
    return {SPW_ERR_CONFIG, "key '" + key + "' contains '=': pass the key and the value "
                            "separately, e.g. spw_job_set(job, \"train.lr\", \"0.01\")"};
  }
  if (built_ != BuiltModel::none && is_built_key(name)) {
    return bad_state(name + " belongs to the model built by calls (" +
                     (built_ == BuiltModel::mlp ? "spw_job_set_input/spw_job_add_dense"
                                                : "spw_job_add_transformer_blocks") +
                     "): drop this spw_job_set, or build the whole model with spw_job_set");
  }
  const std::string argument = name + "=" + value;
  const AbiError checked = from_status(check_override(argument, kSetLabel));
  if (checked.code != SPW_OK) return checked;
  overrides_.push_back(argument);
  return ok();
}

AbiError JobDraft::set_input(int width) {
  if (width < 1) {
    return {SPW_ERR_INVALID_ARGUMENT,
            "the input width must be at least 1, got " + std::to_string(width)};
  }
  if (built_ == BuiltModel::gpt) {
    return bad_state("the model was begun as a GPT by spw_job_add_transformer_blocks: an MLP "
                     "input cannot be added to it");
  }
  if (built_ == BuiltModel::mlp) {
    return bad_state("the input width is set already (" + std::to_string(dims_.front()) +
                     "): call spw_job_set_input once, before spw_job_add_dense");
  }
  for (const char* key : {"model.kind", "model.dims"}) {
    if (sets_key(key)) {
      return bad_state(std::string(key) + " was set by spw_job_set: build the model either "
                       "with spw_job_set or with spw_job_set_input and spw_job_add_dense");
    }
  }
  built_ = BuiltModel::mlp;
  dims_.assign(1, width);
  return ok();
}

AbiError JobDraft::add_dense(int width) {
  if (width < 1) {
    return {SPW_ERR_INVALID_ARGUMENT,
            "a dense layer's width must be at least 1, got " + std::to_string(width)};
  }
  if (built_ != BuiltModel::mlp) {
    return bad_state("call spw_job_set_input before spw_job_add_dense: the first layer needs "
                     "its input width");
  }
  dims_.push_back(width);
  return ok();
}

AbiError JobDraft::add_transformer_blocks(int count) {
  if (count < 1) {
    return {SPW_ERR_INVALID_ARGUMENT,
            "the block count must be at least 1, got " + std::to_string(count)};
  }
  if (built_ == BuiltModel::mlp) {
    return bad_state("the model was begun as an MLP by spw_job_set_input: transformer blocks "
                     "cannot be added to it");
  }
  for (const char* key : {"model.kind", "model.layers"}) {
    if (sets_key(key)) {
      return bad_state(std::string(key) + " was set by spw_job_set: build the model either "
                       "with spw_job_set or with spw_job_add_transformer_blocks");
    }
  }
  if (count > std::numeric_limits<int>::max() - layers_) {
    return {SPW_ERR_INVALID_ARGUMENT, "the model would have more than " +
                                          std::to_string(std::numeric_limits<int>::max()) +
                                          " blocks"};
  }
  built_ = BuiltModel::gpt;
  layers_ += count;
  return ok();
}

std::vector<std::string> JobDraft::overrides_with_defaults() const {
  std::vector<std::string> overrides;
  if (!sets_length()) overrides.push_back(kDefaultLength);
  overrides.insert(overrides.end(), overrides_.begin(), overrides_.end());
  return overrides;
}

bool JobDraft::sets_length() const {
  return text_sets_length_ || sets_key("train.steps") || sets_key("train.epochs");
}

AbiError JobDraft::resolve(JobConfig& out) const {
  std::vector<std::string> overrides = overrides_with_defaults();
  if (built_ == BuiltModel::mlp) {
    if (dims_.size() < 2) {
      return bad_state("the MLP has an input width but no layers: add at least one with "
                       "spw_job_add_dense");
    }
    overrides.push_back("model.kind=\"mlp\"");
    overrides.push_back("model.dims=" + toml_array(dims_));
  } else if (built_ == BuiltModel::gpt) {
    overrides.push_back("model.kind=\"gpt\"");
    overrides.push_back("model.layers=" + std::to_string(layers_));
  }
  auto job = parse_job_string(text_, source_name_, overrides, kSetLabel);
  if (!job.ok()) return from_status(job.status());
  // The stand-in length would end the decay at step 1 and hold min_lr from then on.
  if (!sets_length() && job->train.lr_decay != LrDecay::constant && !job->train.decay_steps) {
    return {SPW_ERR_CONFIG, "train.lr_decay = \"" + std::string(to_string(job->train.lr_decay)) +
                                "\" needs train.decay_steps (or train.steps): through the C "
                                "ABI spw_trainer_train decides how long the run is, so the "
                                "job must say where the decay ends"};
  }
  out = std::move(job).value();
  return ok();
}

}  // namespace spw::capi
