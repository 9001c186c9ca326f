#include "offload/file_rate.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "kernels/numa_allocator.hpp"
#include "offload/file_tier.hpp"

namespace spw::offload {

namespace {

double seconds_between(std::chrono::steady_clock::time_point start,
                       std::chrono::steady_clock::time_point end) {
  return std::chrono::duration<double>(end - start).count();
}

// Bytes that no file system compresses or deduplicates away (zeros would flatter a
// compressing one), written here so every page is faulted in before anything is timed.
void fill(void* data, std::size_t bytes) {
  std::uint64_t state = 0x9E3779B97F4A7C15ull;
  auto* out = static_cast<unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; i += sizeof state) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    std::memcpy(out + i, &state, std::min(sizeof state, bytes - i));
  }
}

struct Repeat {
  double store_s = 0, load_s = 0;
};

}  // namespace

Result<FileRate> measure_file_rate(const std::string& dir, std::size_t bytes, int repeats) {
  if (bytes == 0)
    return error(StatusCode::invalid_argument,
                 "measuring the file tier's rate: bytes must be positive, got 0");
  if (repeats < 1)
    return error(StatusCode::invalid_argument,
                 "measuring the file tier's rate: repeats must be at least 1, got " +
                     std::to_string(repeats));
  std::string path = dir;
  if (path.empty()) {
    SPW_ASSIGN_OR_RETURN(path, default_offload_dir());
  }
  const std::string context = "measuring the file tier's rate in " + path;

  auto tier = FileTier::create(path);
  if (!tier.ok()) return tier.status().with_context(context);
  // Page-aligned and placed like a stash's tensors, so the tier takes the same O_DIRECT path.
  auto memory = allocate(bytes, MemoryCategory::stash, MemoryPlacement::local(), FirstTouch::none);
  if (!memory.ok()) return memory.status().with_context(context);
  fill((*memory)->data(), bytes);
  // One region: the tier moves all of a stash's regions in one pwritev / preadv, so splitting
  // page-aligned memory into several tensors would not change what the device is asked for.
  const std::vector<Region> regions = {{(*memory)->data(), bytes}};

  std::vector<Repeat> timed;
  for (int r = 0; r < repeats; ++r) {
    const auto id = static_cast<std::uint64_t>(r);
    const auto start = std::chrono::steady_clock::now();
    Status status = (*tier)->store(id, regions);
    const auto stored = std::chrono::steady_clock::now();
    if (!status.ok()) return status.with_context(context);
    status = (*tier)->load(id, regions);
    const auto loaded = std::chrono::steady_clock::now();
    (*tier)->drop(id);
    if (!status.ok()) return status.with_context(context);
    timed.push_back({seconds_between(start, stored), seconds_between(stored, loaded)});
  }

  // The slower of the middle two, by round-trip time, when there are two.
  const auto middle = timed.begin() + repeats / 2;
  std::nth_element(timed.begin(), middle, timed.end(), [](const Repeat& a, const Repeat& b) {
    return a.store_s + a.load_s < b.store_s + b.load_s;
  });
  const double b = static_cast<double>(bytes);
  FileRate rate;
  rate.bytes_per_s = 2 * b / (middle->store_s + middle->load_s);
  rate.store_bytes_per_s = b / middle->store_s;
  rate.load_bytes_per_s = b / middle->load_s;
  rate.direct_io = (*tier)->direct_io();
  rate.directory = (*tier)->directory();
  return rate;
}

}  // namespace spw::offload
