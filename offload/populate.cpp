#include "offload/populate.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

namespace spw::offload {

void populate(const std::vector<Region>& regions) {
  static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  for (const Region& region : regions) {
    const auto start = reinterpret_cast<std::uintptr_t>(region.data);
    const std::uintptr_t begin = (start + page - 1) / page * page;
    const std::uintptr_t end = (start + region.bytes) / page * page;
    if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE);
  }
}

}  // namespace spw::offload
