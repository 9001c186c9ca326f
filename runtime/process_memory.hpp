// What the operating system says about this process's memory, beside the ledger's own
// accounting: the ledger counts the tensors spillway allocates, resident set size also counts
// what MPI, BLIS, the C++ runtime and untracked buffers hold, so a report shows both.
#pragma once

#include <cstddef>

namespace spw {

// The process's peak resident set size so far (Linux: ru_maxrss, the same high-water mark as
// VmHWM in /proc/self/status), in bytes; 0 where the system does not say.
std::size_t peak_resident_bytes();

}  // namespace spw
