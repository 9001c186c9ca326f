// What a checkpoint file is called inside (checkpoint.hpp describes the layout) and which
// lists of tensors can make one: shared by saving and loading.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/status.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/parameters.hpp"

namespace spw::checkpoint_format {

inline constexpr const char* kOptimizerGroup = "optimizer";
inline constexpr const char* kMetaGroup = "meta";
inline constexpr const char* kFormat = "spillway-checkpoint";
inline constexpr std::int64_t kFormatVersion = 1;

// Every parameter has a tensor and a name that can be a dataset's at the file's root (not
// empty, no '/', not a group's, listed once); a part is an ascending choice of rows of its
// whole tensor that adds up to its own shape.
Status check_names(const std::vector<NamedParameter>& params);

// Specs of one name are one dataset: either a single whole tensor, or parts of one shape
// whose rows fill the dataset exactly once.
Status check_specs(const std::vector<CheckpointTensorSpec>& specs);

// The dataset a parameter is stored in: its own, or the whole tensor it is a part of.
const std::string& dataset_name(const NamedParameter& p);

}  // namespace spw::checkpoint_format
