// A job as the C ABI builds it: TOML text, then settings in call order, then a model built
// by calls. It becomes a JobConfig only when checked as a whole (spw_job_check,
// spw_trainer_create), because a job half-way through being set is often inconsistent.
#pragma once

#include <string>
#include <vector>

#include "kernels/status.hpp"
#include "runtime/capi/abi_status.hpp"
#include "runtime/job_config.hpp"

namespace spw::capi {

class JobDraft {
 public:
  // Checks `toml_text` as a complete job now, so a bad file is reported where it is named.
  static Result<JobDraft> from_text(std::string toml_text, std::string source_name);

  // The key and the value's TOML syntax are checked now; values later, as a whole job.
  // Each returns code SPW_OK or the failure with its message (without the function's name).
  AbiError set(const std::string& key, const std::string& value);
  AbiError set_input(int width);
  AbiError add_dense(int width);
  AbiError add_transformer_blocks(int count);

  // SPW_ERR_BAD_STATE when the model was begun by calls and not finished, else the job as
  // a whole: the JobConfig, or SPW_ERR_CONFIG and the first problem.
  AbiError resolve(JobConfig& out) const;

 private:
  enum class BuiltModel { none, mlp, gpt };
  // Keys the model-building calls own once they are used.
  static bool is_built_key(const std::string& key);
  bool sets_key(const std::string& key) const;
  // Whether the text or a setting gives train.steps or train.epochs; if not, the job is
  // checked with a stand-in length (kDefaultLength).
  bool sets_length() const;
  std::vector<std::string> overrides_with_defaults() const;

  // Whether the TOML text says how long to train (train.steps or train.epochs). The ABI's
  // spw_trainer_train says it instead, so a job without either is checked with steps = 1.
  bool text_sets_length_ = false;
  std::string text_;
  std::string source_name_ = "job";
  std::vector<std::string> overrides_;  // "section.key=value", in call order
  BuiltModel built_ = BuiltModel::none;
  std::vector<int> dims_;  // mlp: input width, then each dense layer's
  int layers_ = 0;         // gpt
};

}  // namespace spw::capi
