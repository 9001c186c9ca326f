// How much more memory the processes of this node can touch before the kernel's OOM killer
// (or the batch system's cgroup) ends them: the figure the node's memory budget starts from
// (runtime/node_memory_budget.hpp). Read from the kernel's own accounting, not from hwloc,
// whose memory figures can be below the real ones on VMs.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace spw {

struct AvailableMemory {
  std::size_t bytes = 0;
  // Where the figure comes from, for messages: "MemAvailable + SwapFree in /proc/meminfo" or
  // "the memory cgroup /slurm/uid_1/job_7 (limit 8.00 GiB)".
  std::string source;
};

// Where the facts live; tests point these at files of their own.
struct MemoryFactFiles {
  std::string meminfo = "/proc/meminfo";
  std::string self_cgroup = "/proc/self/cgroup";
  std::string cgroup_root = "/sys/fs/cgroup";
};

// The smaller of what the whole machine has free (MemAvailable + SwapFree) and, for each
// memory cgroup from this process's up to the root that sets a limit (cgroup v2
// memory.max, v1 memory.limit_in_bytes), that limit less the cgroup's usage that cannot be
// reclaimed (its usage less its page cache). nullopt when /proc/meminfo cannot be read or
// names neither figure: then nothing is known and no budget applies.
std::optional<AvailableMemory> available_memory(const MemoryFactFiles& files = {});

}  // namespace spw
