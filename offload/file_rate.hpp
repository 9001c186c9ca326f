// The file tier's measured round-trip rate, for the planner to price offloading to files
// with this machine's storage instead of an assumed figure. It goes through FileTier itself,
// so it sees what a stash would: O_DIRECT exactly where the tier uses it, the page cache
// where the tier cannot avoid it, and the tier's own staging of unaligned ends.
#pragma once

#include <cstddef>
#include <string>

#include "kernels/status.hpp"

namespace spw::offload {

struct FileRate {
  double bytes_per_s = 0;        // 2 * bytes / (store seconds + load seconds)
  double store_bytes_per_s = 0;  // bytes / store seconds, of the same repeat
  double load_bytes_per_s = 0;   // bytes / load seconds, of the same repeat
  bool direct_io = false;        // whether the tier used O_DIRECT there
  std::string directory;         // where it measured (the default resolved)
};

// `bytes` stored through a FileTier in `dir` (empty: default_offload_dir()) from page-aligned
// memory and loaded back, `repeats` times, each under an id of its own dropped after the
// load. The figures are those of the median repeat by round-trip rate; of an even count, the
// slower of the middle two. Taking all three from one repeat keeps bytes_per_s the harmonic
// mean of the other two. invalid_argument naming `bytes` or `repeats` when zero; the tier's
// and the allocation's failures with the directory as context.
Result<FileRate> measure_file_rate(const std::string& dir, std::size_t bytes, int repeats);

}  // namespace spw::offload
