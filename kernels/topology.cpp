#include "topology.hpp"

#include <cerrno>
#include <cstring>
#include <mutex>

namespace spw {

namespace {


struct CpusetGuard {
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  ~CpusetGuard() { hwloc_bitmap_free(set); }
};

}  // namespace

Topology::~Topology() { hwloc_topology_destroy(topology_); }

Result<std::unique_ptr<Topology>> Topology::load() {
  hwloc_topology_t topology = nullptr;
  if (hwloc_topology_init(&topology) != 0) {
    return error(StatusCode::internal, "hwloc_topology_init failed");
  }
  // Memory attributes (HBM vs DRAM) and I/O are not needed to place compute; skip the costly
  // I/O discovery.
  hwloc_topology_set_io_types_filter(topology, HWLOC_TYPE_FILTER_KEEP_NONE);
  if (hwloc_topology_load(topology) != 0) {
    const int err = errno;
    hwloc_topology_destroy(topology);
    return error(StatusCode::internal, std::string("hwloc_topology_load failed: ") +
                                           std::strerror(err));
  }
  return std::unique_ptr<Topology>(new Topology(topology));
}

Result<std::unique_ptr<Topology>> Topology::synthetic(const std::string& description) {
  hwloc_topology_t topology = nullptr;
  if (hwloc_topology_init(&topology) != 0) {
    return error(StatusCode::internal, "hwloc_topology_init failed");
  }
  if (hwloc_topology_set_synthetic(topology, description.c_str()) != 0) {
    hwloc_topology_destroy(topology);
    return error(StatusCode::invalid_argument,
                 "hwloc cannot read the synthetic topology '" + description +
                     "': write it like \"pack:2 [numa] core:4 pu:1\"");
  }
  if (hwloc_topology_load(topology) != 0) {
    hwloc_topology_destroy(topology);
    return error(StatusCode::internal, "hwloc could not load synthetic topology '" +
                                           description + "'");
  }
  return std::unique_ptr<Topology>(new Topology(topology));
}

Result<const Topology*> Topology::process() {
  static std::once_flag once;
  static std::unique_ptr<Topology> topology;
  static Status failure;
  std::call_once(once, [] {
    auto loaded = load();
    if (loaded.ok()) {
      topology = std::move(loaded).value();
    } else {
      failure = loaded.status();
    }
  });
  if (!topology) return failure;
  return static_cast<const Topology*>(topology.get());
}

bool Topology::is_this_system() const { return hwloc_topology_is_thissystem(topology_) != 0; }

int Topology::numa_node_count() const {
  const int n = hwloc_get_nbobjs_by_type(topology_, HWLOC_OBJ_NUMANODE);
  return n > 0 ? n : 1;
}

int Topology::core_count() const {
  const int n = hwloc_get_nbobjs_by_type(topology_, HWLOC_OBJ_CORE);
  return n > 0 ? n : pu_count();
}

int Topology::pu_count() const {
  const int n = hwloc_get_nbobjs_by_type(topology_, HWLOC_OBJ_PU);
  return n > 0 ? n : 1;
}

std::vector<NumaNodeInfo> Topology::numa_nodes() const {
  std::vector<NumaNodeInfo> nodes;
  const int n = hwloc_get_nbobjs_by_type(topology_, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < n; ++i) {
    hwloc_obj_t obj =
        hwloc_get_obj_by_type(topology_, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
    NumaNodeInfo info;
    info.logical_index = i;
    info.os_index = obj->os_index;
    info.local_memory_bytes = obj->attr ? obj->attr->numanode.local_memory : 0;
    // hwloc names the kind in the subtype where the platform tells it (HBM, MCDRAM, DRAM,
    // NVM, ...), and for memory behind a DAX device only in the DAXType info (NVM or SPM).
    if (obj->subtype) {
      info.kind = obj->subtype;
    } else if (const char* dax = hwloc_obj_get_info_by_name(obj, "DAXType")) {
      info.kind = dax;
    }
    info.core_count = hwloc_get_nbobjs_inside_cpuset_by_type(topology_, obj->cpuset,
                                                              HWLOC_OBJ_CORE);
    nodes.push_back(info);
  }
  return nodes;
}

std::optional<int> Topology::numa_node_of_cpuset(hwloc_const_cpuset_t cpuset) const {
  if (hwloc_bitmap_iszero(cpuset)) return std::nullopt;
  const int n = hwloc_get_nbobjs_by_type(topology_, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < n; ++i) {
    hwloc_obj_t obj =
        hwloc_get_obj_by_type(topology_, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
    if (hwloc_bitmap_isincluded(cpuset, obj->cpuset)) return i;
  }
  return std::nullopt;
}

std::optional<int> Topology::numa_node_of_calling_thread() const {
  CpusetGuard binding;
  if (hwloc_get_cpubind(topology_, binding.set, HWLOC_CPUBIND_THREAD) != 0) return std::nullopt;
  return numa_node_of_cpuset(binding.set);
}

std::optional<int> Topology::capacity_node_for(int working_node) const {
  const auto nodes = numa_nodes();
  if (nodes.size() < 2) return std::nullopt;
  const std::string working_kind =
      working_node >= 0 && working_node < static_cast<int>(nodes.size()) ? nodes[working_node].kind
                                                                         : "";
  auto rank = [&](const NumaNodeInfo& node) {
    // Higher is better: a capacity kind when working from HBM, then more memory.
    int kind_score = 0;
    if (working_kind == "HBM" && node.kind != "HBM") kind_score = 1;
    return std::pair<int, std::uint64_t>(kind_score, node.local_memory_bytes);
  };
  std::optional<int> best;
  for (const auto& node : nodes) {
    if (node.logical_index == working_node) continue;
    if (!best || rank(node) > rank(nodes[*best])) best = node.logical_index;
  }
  return best;
}

}  // namespace spw
