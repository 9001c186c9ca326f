#include "runtime/available_memory.hpp"

#include <cstdint>
#include <fstream>
#include <sstream>
#include <vector>

#include "kernels/memory_ledger.hpp"

namespace spw {

namespace {

std::optional<std::string> read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return line;
}

std::optional<std::uint64_t> read_number(const std::string& path) {
  const auto line = read_first_line(path);
  if (!line) return std::nullopt;
  std::istringstream in(*line);
  std::uint64_t value = 0;
  if (!(in >> value)) return std::nullopt;  // also cgroup v2's "max"
  return value;
}

// The value after `key` (a whole first word) in a "key value [unit]" file such as
// /proc/meminfo ("MemAvailable:") or memory.stat ("file").
std::optional<std::uint64_t> read_keyed(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string word;
    std::uint64_t value = 0;
    if (words >> word && word == key && words >> value) return value;
  }
  return std::nullopt;
}

bool exists(const std::string& path) { return std::ifstream(path).good(); }

// "/a/b/c" -> {"/a/b/c", "/a/b", "/a", ""}: a cgroup and its ancestors, whose limits all
// bind it; "" is the root.
std::vector<std::string> self_and_ancestors(std::string path) {
  while (!path.empty() && path.back() == '/') path.pop_back();
  std::vector<std::string> out;
  for (;;) {
    out.push_back(path);
    if (path.empty()) break;
    path.erase(path.rfind('/') == std::string::npos ? 0 : path.rfind('/'));
  }
  return out;
}

// The tightest headroom of `cgroup` and its ancestors under `base`: limit less the usage
// reclaim cannot free. v1 reports "no limit" as a number near 2^63.
struct CgroupFiles {
  const char* limit;
  const char* usage;
  const char* cache_key;  // in memory.stat
};

void tighten_by_cgroups(const std::string& base, const std::string& cgroup,
                        const CgroupFiles& files, std::optional<AvailableMemory>& best) {
  constexpr std::uint64_t kNoLimit = std::uint64_t{1} << 62;
  for (const std::string& group : self_and_ancestors(cgroup)) {
    const std::string dir = base + group;
    const auto limit = read_number(dir + "/" + files.limit);
    if (!limit || *limit >= kNoLimit) continue;
    const std::uint64_t usage = read_number(dir + "/" + files.usage).value_or(0);
    const std::uint64_t cache = read_keyed(dir + "/memory.stat", files.cache_key).value_or(0);
    const std::uint64_t held = usage > cache ? usage - cache : 0;
    const std::uint64_t headroom = *limit > held ? *limit - held : 0;
    if (best && best->bytes <= headroom) continue;
    best = AvailableMemory{static_cast<std::size_t>(headroom),
                           "the memory cgroup " + (group.empty() ? std::string("/") : group) +
                               " (limit " + format_bytes(static_cast<std::size_t>(*limit)) + ", " +
                               format_bytes(static_cast<std::size_t>(held)) + " held)"};
  }
}

}  // namespace

std::optional<AvailableMemory> available_memory(const MemoryFactFiles& files) {
  const auto available_kib = read_keyed(files.meminfo, "MemAvailable:");
  if (!available_kib) return std::nullopt;
  const std::uint64_t swap_kib = read_keyed(files.meminfo, "SwapFree:").value_or(0);
  std::optional<AvailableMemory> best =
      AvailableMemory{static_cast<std::size_t>((*available_kib + swap_kib) * 1024),
                      "MemAvailable + SwapFree in " + files.meminfo};

  // Lines "ID:CONTROLLERS:PATH": "0::PATH" is cgroup v2, "N:...memory...:PATH" v1's memory.
  std::ifstream in(files.self_cgroup);
  std::string line;
  while (std::getline(in, line)) {
    const auto first = line.find(':');
    const auto second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (line.compare(0, first, "0") == 0 && controllers.empty()) {
      // A hybrid system mounts v2 under unified/.
      const std::string base = exists(files.cgroup_root + "/cgroup.controllers")
                                   ? files.cgroup_root
                                   : files.cgroup_root + "/unified";
      tighten_by_cgroups(base, path, {"memory.max", "memory.current", "file"}, best);
    } else {
      std::istringstream list(controllers);
      std::string controller;
      while (std::getline(list, controller, ',')) {
        if (controller != "memory") continue;
        tighten_by_cgroups(files.cgroup_root + "/memory", path,
                           {"memory.limit_in_bytes", "memory.usage_in_bytes", "total_cache"}, best);
      }
    }
  }
  return best;
}

}  // namespace spw
