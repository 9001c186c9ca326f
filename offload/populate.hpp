// Mapping a prefetch's target pages before the tier fills them. Targets arrive untouched
// (Tensor::uninitialized); a copy into them takes one page fault per 4 KiB, while one
// madvise(MADV_POPULATE_WRITE) maps them all in the kernel: on gpt-m's peer tier the engine
// thread's page-fault samples halved. The engine calls it before every load, timed apart
// (EngineStats::map_seconds), so the transfer's own rate stays visible; O_DIRECT reads
// would map the pages in the kernel anyway.
#pragma once

#include <vector>

#include "offload/tier.hpp"

namespace spw::offload {

// Maps the whole pages inside each region. Where the kernel lacks MADV_POPULATE_WRITE (before
// Linux 5.14) nothing happens and the copy faults the pages in as before.
void populate(const std::vector<Region>& regions);

}  // namespace spw::offload
