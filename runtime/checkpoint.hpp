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
// One rank writes a checkpoint, with serial HDF5 (default file access, no MPI-IO). HDF5 only
// lays the file out, in a scratch file in /dev/shm (else $TMPDIR) that holds the metadata
// alone; spillway then writes that image and the tensor bytes to "<path>.tmp.<pid>", fsyncs
// it and renames it over <path>. A crash leaves the old checkpoint or the new one, never half
// of one, and a full disk is an error like any other (HDF5 1.10 writing the file itself could
// crash at exit after such an error: see checkpoint.cpp).
//
// Loads check every dataset (present, float32, the expected shape) before writing into any
// tensor, so a checkpoint that does not fit the model changes nothing; only an I/O error in
// the middle of reading data that passed those checks can leave tensors partly loaded.
// Datasets the model does not ask for are ignored, so a pipeline rank can load its own
// stage's parameters from a whole-model file, and train.init_from can read any HDF5 file of
// float32 datasets named by state_dict keys (a converted PyTorch checkpoint, say).
#pragma once

#include <cstdint>
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

}  // namespace spw
