// Writing a result file so a reader never sees half of one: write a temporary file beside
// the target, flush and sync it, then rename it over the target. Every layer writes its
// outputs (profiles, topologies, reports) this way.
#pragma once

#include <string>

#include "kernels/status.hpp"

namespace spw {

// io_error naming `path` (and the OS reason) when any step fails; no temporary is left.
Status write_file_atomically(const std::string& path, const std::string& contents);

}  // namespace spw
