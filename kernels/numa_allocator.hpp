// Rank memory: allocations bound to a NUMA node through hwloc, first-touched by the OpenMP
// threads that will compute on them, and accounted in the rank's memory ledger.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "memory_category.hpp"
#include "memory_ledger.hpp"
#include "status.hpp"

namespace spw {

class Topology;

struct MemoryPlacement {
  enum class Policy {
    local,      // the NUMA node of the calling thread's binding (first touch if unbound)
    numa_node,  // a given NUMA node (logical index), e.g. the capacity tier
  };
  Policy policy = Policy::local;
  int numa_node = -1;   // with Policy::numa_node
  bool strict = false;  // fail instead of falling back to unbound memory if binding fails

  static MemoryPlacement local() { return {}; }
  static MemoryPlacement on_node(int node, bool strict_binding = false) {
    return {Policy::numa_node, node, strict_binding};
  }
};

enum class FirstTouch {
  parallel_zero,  // zero the pages with the OpenMP team, statically split like the compute
  none,           // leave pages untouched (their contents are undefined)
};

// An owned block of rank memory; frees itself and returns its bytes to the ledger.
class Allocation {
 public:
  ~Allocation();
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  MemoryCategory category() const { return category_; }
  // The NUMA node (logical index) the pages were bound to, or -1 when unbound (one node,
  // first-touch policy, or a binding the OS refused without `strict`).
  int bound_node() const { return bound_node_; }
  // Why the memory is not bound where it was asked to be, if it is not.
  const std::string& binding_note() const { return binding_note_; }

 private:
  friend Result<std::unique_ptr<Allocation>> allocate(std::size_t, MemoryCategory,
                                                      MemoryPlacement, FirstTouch,
                                                      MemoryLedger&);
  Allocation(void* data, std::size_t bytes, MemoryCategory category, MemoryLedger& ledger)
      : data_(data), bytes_(bytes), category_(category), ledger_(ledger) {}

  void* data_;
  std::size_t bytes_;
  MemoryCategory category_;
  MemoryLedger& ledger_;
  int bound_node_ = -1;
  std::string binding_note_;
};

// Reserves `bytes` in the ledger (failing with the cap message if it does not fit), then
// allocates page-aligned memory placed as asked. Zero bytes gives an empty allocation.
Result<std::unique_ptr<Allocation>> allocate(std::size_t bytes, MemoryCategory category,
                                             MemoryPlacement placement = {},
                                             FirstTouch first_touch = FirstTouch::parallel_zero,
                                             MemoryLedger& ledger = MemoryLedger::process());

// Scratch kept from call to call (an op's thread_local ScratchBuffer): for passes that take
// about as long as mapping and unmapping fresh pages would.
class ScratchBuffer {
 public:
  ScratchBuffer() = default;
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  ~ScratchBuffer();
  // Grows the buffer to at least `bytes` of untouched workspace, else leaves it as it is, and
  // returns its memory.
  Result<void*> reserve(std::size_t bytes);

 private:
  std::unique_ptr<Allocation> allocation_;
};

// What every thread's ScratchBuffers hold now. The profiler counts it as the process's own
// (a rank holds it once, whichever blocks it runs), and must see it even when an earlier
// run in the process left it allocated.
std::size_t scratch_buffer_bytes();

// Zeroes [data, data + bytes) with the OpenMP team in static chunks of whole pages, so each
// page is first touched by the thread that computes on that part of the buffer.
void parallel_first_touch(void* data, std::size_t bytes);

}  // namespace spw
