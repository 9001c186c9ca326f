#include "numa_allocator.hpp"

#include <hwloc.h>
#include <omp.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "topology.hpp"

namespace spw {

namespace {

constexpr std::size_t kPage = 4096;

struct Bitmap {
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  ~Bitmap() { hwloc_bitmap_free(set); }
};

}  // namespace

Allocation::~Allocation() {
  if (data_ != nullptr) {
    auto topology = Topology::process();
    if (topology.ok()) {
      hwloc_free((*topology)->handle(), data_, bytes_);
    }
  }
  ledger_.release(category_, bytes_);
}

void parallel_first_touch(void* data, std::size_t bytes) {
  auto* base = static_cast<unsigned char*>(data);
  const std::int64_t pages = static_cast<std::int64_t>((bytes + kPage - 1) / kPage);
#pragma omp parallel for schedule(static)
  for (std::int64_t p = 0; p < pages; ++p) {
    const std::size_t begin = static_cast<std::size_t>(p) * kPage;
    const std::size_t length = begin + kPage <= bytes ? kPage : bytes - begin;
    std::memset(base + begin, 0, length);
  }
}

Result<std::unique_ptr<Allocation>> allocate(std::size_t bytes, MemoryCategory category,
                                             MemoryPlacement placement, FirstTouch first_touch,
                                             MemoryLedger& ledger) {
  SPW_TRY(ledger.reserve(category, bytes));
  if (bytes == 0) {
    return std::unique_ptr<Allocation>(new Allocation(nullptr, 0, category, ledger));
  }
  auto fail = [&](Status status) {
    ledger.release(category, bytes);
    return status;
  };

  auto topology_result = Topology::process();
  if (!topology_result.ok()) return fail(topology_result.status());
  const Topology& topology = **topology_result;
  hwloc_topology_t handle = topology.handle();

  std::optional<int> target;
  if (placement.policy == MemoryPlacement::Policy::numa_node) {
    if (placement.numa_node < 0 || placement.numa_node >= topology.numa_node_count()) {
      return fail(error(StatusCode::invalid_argument,
                        "cannot place memory on NUMA node " +
                            std::to_string(placement.numa_node) + ": this machine has " +
                            std::to_string(topology.numa_node_count()) + " NUMA node(s)"));
    }
    target = placement.numa_node;
  } else {
    target = topology.numa_node_of_calling_thread();
  }

  void* data = nullptr;
  int bound_node = -1;
  std::string note;
  if (target && topology.numa_node_count() > 1) {
    hwloc_obj_t node = hwloc_get_obj_by_type(handle, HWLOC_OBJ_NUMANODE,
                                             static_cast<unsigned>(*target));
    errno = 0;
    data = hwloc_alloc_membind(handle, bytes, node->nodeset, HWLOC_MEMBIND_BIND,
                               HWLOC_MEMBIND_BYNODESET | HWLOC_MEMBIND_STRICT);
    if (data != nullptr) {
      bound_node = *target;
    } else {
      note = "binding to NUMA node " + std::to_string(*target) + " refused (" +
             std::strerror(errno) + ")";
      if (placement.strict) {
        return fail(error(StatusCode::unsupported,
                          "cannot allocate " + std::to_string(bytes) + " bytes for " +
                              std::string(memory_category_name(category)) + ": " + note));
      }
    }
  } else if (!target && placement.policy == MemoryPlacement::Policy::local) {
    note = "calling thread not bound within one NUMA node: pages follow first touch";
  }
  if (data == nullptr) {
    data = hwloc_alloc(handle, bytes);
    if (data == nullptr) {
      return fail(error(StatusCode::out_of_memory,
                        "the operating system refused " + std::to_string(bytes) +
                            " bytes for " + std::string(memory_category_name(category))));
    }
    // With a single node every page is local; say so rather than leave it unexplained.
    if (topology.numa_node_count() == 1) bound_node = 0;
  }

  std::unique_ptr<Allocation> allocation(new Allocation(data, bytes, category, ledger));
  allocation->bound_node_ = bound_node;
  allocation->binding_note_ = std::move(note);
  if (first_touch == FirstTouch::parallel_zero) parallel_first_touch(data, bytes);
  return allocation;
}

namespace {
std::atomic<std::size_t> scratch_bytes_held{0};
}  // namespace

ScratchBuffer::~ScratchBuffer() {
  if (allocation_) scratch_bytes_held -= allocation_->bytes();
}

Result<void*> ScratchBuffer::reserve(std::size_t bytes) {
  if (!allocation_ || allocation_->bytes() < bytes) {
    if (allocation_) scratch_bytes_held -= allocation_->bytes();
    allocation_.reset();
    SPW_ASSIGN_OR_RETURN(allocation_, allocate(bytes, MemoryCategory::workspace,
                                               MemoryPlacement::local(), FirstTouch::none));
    scratch_bytes_held += allocation_->bytes();
  }
  return allocation_->data();
}

std::size_t scratch_buffer_bytes() { return scratch_bytes_held.load(); }

}  // namespace spw
