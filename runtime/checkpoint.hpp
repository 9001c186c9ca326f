// Checkpoints: one HDF5 file per checkpoint, laid out so that Python reads it like a
// PyTorch state_dict (h5py.File(p)["blocks.0.ln1.weight"][...]).
//
//   /<state_dict key>                 float32 dataset per parameter, PyTorch's shape; the key
//                                     is one dataset name, dots included (no nested groups)
//   /optimizer                        group, present when an optimizer was saved
//     attributes kind ("sgd"|"adamw"), step (int64), lr, momentum, beta1, beta2, eps,
//                weight_decay (float64; informational, a resume takes them from its job)
//   /optimizer/<state_dict key>/<state name>
//                                     float32 datasets shaped like the parameter: exp_avg and
//                                     exp_avg_sq (AdamW), momentum_buffer (SGD with momentum)
//   /meta                             group with attributes format ("spillway-checkpoint"),
//                                     format_version (int64, 1), spillway_version (string),
//                                     step, data_position (int64), config_json (string)
//
// Strings are variable-length UTF-8, which h5py returns as str and which is not bound by the
// 64 KiB limit on attributes stored in an object header (config_json can be long).
//
// Serial HDF5 (default file access, no MPI-IO) only lays the file out, in a scratch file in
// /dev/shm (else $TMPDIR) that holds the metadata alone; spillway then writes that image and
// the tensor bytes to "<path>.tmp.<pid>", fsyncs it and renames it over <path>. A crash
// leaves the old checkpoint or the new one, never half of one, and a full disk is an error
// like any other (HDF5 1.10 writing the file itself could crash at exit after such an
// error: see checkpoint_save.cpp). Since the layout needs names and shapes only, those steps
// can run in different processes: a pipeline checkpoint is laid out by one rank and filled
// by each rank with its own tensors (runtime/pipeline_checkpoint.hpp).
//
// A parameter that holds some rows of a bigger tensor (NamedParameter::part: a layer split
// across two blocks) is stored as those rows of the whole tensor's dataset, and its
// optimizer state as the same rows of the whole tensor's state, so a checkpoint does not
// depend on how (or whether) a layer was split: a split model loads an unsplit one's, and
// the other way round. Saving needs every row of such a dataset held by some part.
//
// Loads check every dataset (present, float32, the expected shape) before writing into any
// tensor, so a checkpoint that does not fit the model changes nothing; only an I/O error in
// the middle of reading data that passed those checks can leave tensors partly loaded.
// Datasets the model does not ask for are ignored, so a pipeline rank can load its own
// stage's parameters from a whole-model file, and train.init_from can read any HDF5 file of
// float32 datasets named by state_dict keys (a converted PyTorch checkpoint, say). Whether a
// whole checkpoint is the job's model is checkpoint_model.hpp's question.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/status.hpp"
#include "runtime/optimizer.hpp"
#include "runtime/parameters.hpp"

namespace spw {

struct CheckpointMeta {
  std::int64_t step = 0;           // training steps done when the checkpoint was taken
  std::int64_t data_position = 0;  // where the data stream resumes (samples consumed)
  std::string config_json;         // the job configuration the run was started with
};

// Writes parameter values (grad is not used), the optimizer's state when `optimizer` is not
// null, and `meta`. Parameter names must be unique, non-empty, without '/', and neither
// "optimizer" nor "meta". On failure no file is left at the temporary path and <path> is
// untouched.
Status save_checkpoint(const std::string& path, const std::vector<NamedParameter>& params,
                       const Optimizer* optimizer, const CheckpointMeta& meta);

// Loads parameter values only (train.init_from: fine-tuning or a new run from old weights).
Status load_parameters(const std::string& path, const std::vector<NamedParameter>& params);

// A full resume: parameter values, the optimizer's state and step (when `optimizer` is not
// null; the file must then hold state of the same kind) and `meta`. Nothing, `meta`
// included, is changed unless every dataset checks out.
Status load_checkpoint(const std::string& path, const std::vector<NamedParameter>& params,
                       Optimizer* optimizer, CheckpointMeta& meta);

// The meta group alone: where a checkpoint resumes, before anything is built to load it.
Result<CheckpointMeta> read_checkpoint_meta(const std::string& path);

// A load in two halves, for callers that must know that every process can load before any
// of them changes its state (a pipeline resume): prepare checks every dataset and reads the
// meta, changing nothing; apply reads the tensors and sets the optimizer's step. `params`'
// tensors and `optimizer` must outlive the load.
class CheckpointLoad {
 public:
  static Result<std::unique_ptr<CheckpointLoad>> prepare(const std::string& path,
                                                         const std::vector<NamedParameter>& params,
                                                         Optimizer* optimizer);
  ~CheckpointLoad();
  CheckpointLoad(const CheckpointLoad&) = delete;
  CheckpointLoad& operator=(const CheckpointLoad&) = delete;

  const CheckpointMeta& meta() const;
  // Only an I/O error in the middle of reading can leave tensors partly loaded.
  Status apply();

 private:
  CheckpointLoad();
  struct State;
  std::unique_ptr<State> state_;
};

// ---- save_checkpoint in steps that can run in different processes ----------------------
//
// On a file system every step's process sees: one process lays the whole file out and
// creates the temporary, each writes its tensors' bytes where the layout put them, one
// renames the temporary into place. The caller removes the temporary if any step fails.

struct CheckpointTensorSpec {
  std::string name;                 // state_dict key
  std::vector<std::int64_t> shape;  // PyTorch's; empty for a scalar
  // Empty: the tensor is the whole dataset. Otherwise it is these rows of the dataset,
  // which other specs of the same name and shape fill up (NamedParameter::part).
  std::vector<RowRange> rows;
};

// Everything a checkpoint holds but tensor bytes.
struct CheckpointOutline {
  std::vector<CheckpointTensorSpec> parameters;
  bool has_optimizer = false;
  OptimizerSettings optimizer_settings;
  std::int64_t optimizer_step = 0;
  std::vector<std::string> state_names;
  // One group each, with one dataset per state name shaped like the parameter.
  std::vector<CheckpointTensorSpec> optimizer_parameters;
  CheckpointMeta meta;
};

CheckpointOutline checkpoint_outline(const std::vector<NamedParameter>& params,
                                     const Optimizer* optimizer, const CheckpointMeta& meta);

// Creates `temporary` with the outline's whole HDF5 structure and holes where tensor bytes
// go. Returns each spec's dataset's byte offset, parameters first, then each optimizer
// parameter's states in state_names order; -1 for a dataset without elements. Specs that are
// rows of one dataset share it and its offset; invalid_argument naming the dataset when
// they disagree on its shape, overlap or leave rows out. Leaves no file on failure.
Result<std::vector<std::int64_t>> create_checkpoint_skeleton(const std::string& temporary,
                                                             const CheckpointOutline& outline);

// Bytes [tensor_offset, tensor_offset + bytes) of `tensor` go to file offset `offset`.
struct CheckpointRegion {
  std::int64_t offset;
  const Tensor* tensor;
  std::int64_t tensor_offset = 0;
  std::int64_t bytes = 0;
};

// Pairs the tensors checkpoint_outline(params, optimizer, ...) describes with `offsets`, that
// outline's offsets in create_checkpoint_skeleton's order (a part of a dataset gives one
// region per row range); tensors without elements are left out.
Result<std::vector<CheckpointRegion>> checkpoint_regions(const std::vector<NamedParameter>& params,
                                                         const Optimizer* optimizer,
                                                         const std::vector<std::int64_t>& offsets);

// Writes the regions' bytes into the existing `temporary` and flushes them to disk.
Status write_checkpoint_tensors(const std::string& temporary,
                                const std::vector<CheckpointRegion>& regions);

// Renames `temporary` over `path`, so the checkpoint appears whole or not at all.
Status publish_checkpoint(const std::string& temporary, const std::string& path);

}  // namespace spw
