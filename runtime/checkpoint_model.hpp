// Whether a checkpoint holds the job's model. A load checks every dataset it reads, but it
// ignores the datasets the model does not ask for (a pipeline rank reads its own stages from
// a whole-model file) and cannot see the keys that shape no tensor: a checkpoint of 8 layers
// resumed by a job of 4 lost half its layers without a word, and one trained with 8 heads
// was evaluated with 4 as another model. So a resume, an evaluation and a sample first
// compare the model keys that change what the model computes with those of the job the
// checkpoint's run was started with (its meta's config_json). The keys that only change how
// it is computed (model.split_layers, model.head_chunk_rows) may differ.
#pragma once

#include <string>

#include "kernels/status.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/job_config.hpp"

namespace spw {

// Success when the model recorded in `meta` is the job's, or when the checkpoint records no
// model (a file another program wrote). Otherwise shape_mismatch, one line naming every key
// that differs with the checkpoint's value and the job's, and the --set that gives the job
// the checkpoint's model.
Status check_checkpoint_model(const std::string& path, const CheckpointMeta& meta,
                              const JobConfig& job);

// read_checkpoint_meta, then check_checkpoint_model.
Result<CheckpointMeta> read_checkpoint_meta_for(const std::string& path, const JobConfig& job);

}  // namespace spw
