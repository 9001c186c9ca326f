// Writing result files so a reader never sees half of one: write a temporary file beside
// the target, flush it, then rename it over the target.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "kernels/atomic_file.hpp"
#include "kernels/status.hpp"

namespace spw {

Status write_json_atomically(const std::string& path, const nlohmann::json& value);
// Creates `dir` and its parents if missing; an error names the directory.
Status ensure_directory(const std::string& dir);

}  // namespace spw
