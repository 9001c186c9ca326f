// Mapping a load's target pages before a CPU copy fills them. Prefetch targets arrive
// untouched (Tensor::uninitialized); a copy into them takes one page fault per 4 KiB, while
// one madvise(MADV_POPULATE_WRITE) maps them all in the kernel: on gpt-m's peer tier the
// engine thread's page-fault samples halved. Tiers that copy with the CPU (peer, host) call
// it; the file tier's O_DIRECT reads map the pages in the kernel already.
#pragma once

#include <vector>

#include "offload/tier.hpp"

namespace spw::offload {

// Maps the whole pages inside each region. Where the kernel lacks MADV_POPULATE_WRITE (before
// Linux 5.14) nothing happens and the copy faults the pages in as before.
void populate(const std::vector<Region>& regions);

}  // namespace spw::offload
