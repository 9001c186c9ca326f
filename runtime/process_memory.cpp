#include "runtime/process_memory.hpp"

#include <sys/resource.h>

namespace spw {

std::size_t peak_resident_bytes() {
  struct rusage usage {};
  if (::getrusage(RUSAGE_SELF, &usage) != 0 || usage.ru_maxrss < 0) return 0;
  return static_cast<std::size_t>(usage.ru_maxrss) * 1024;  // Linux counts in KiB
}

}  // namespace spw
