// Writing memory back and dropping it from every cache level, so that the next access comes
// from DRAM: what a training step leaves a block's parameters and saved activations like by
// the time that block runs again, after the rest of the model has streamed through. The
// profiler (runtime/profiler.cpp) uses it to time each pass the way training will run it.
#pragma once

#include <cstddef>

#include "kernels/tensor.hpp"

namespace spw {

// Every cache line that holds part of [data, data + bytes) is written back if dirty and
// invalidated in every cache level (CLFLUSHOPT where the CPU has it, else CLFLUSH; DC CIVAC
// on AArch64; nothing elsewhere). Contents are unchanged. Returns once the evictions are
// complete (ordered by a fence), so that work timed afterwards does not overlap them.
// About 1 ms for 10 MiB with CLFLUSHOPT on an Emerald Rapids core, ten times as long with
// CLFLUSH, which waits for each line in turn.
void evict_from_caches(const void* data, std::size_t bytes);

inline void evict_from_caches(const Tensor& tensor) {
  evict_from_caches(tensor.data(), tensor.bytes());
}

}  // namespace spw
