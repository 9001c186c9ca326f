#include "offload/engine.hpp"

#include <hwloc.h>
#include <time.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <future>
#include <string>
#include <utility>

#include "kernels/topology.hpp"
#include "offload/crc32c.hpp"
#include "offload/populate.hpp"

namespace spw::offload {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// CPU time of the calling thread: what a request cost the core, without the time the thread
// waited for it, for I/O or for the peer.
double clock_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double thread_cpu_seconds() {
  timespec t{};
  if (::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0) return 0;
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

std::string stash(std::uint64_t id) { return "stash " + std::to_string(id); }

// "0-1", hwloc's list syntax for the PUs a binding may use.
std::string pu_list(hwloc_topology_t topology) {
  char* text = nullptr;
  hwloc_bitmap_list_asprintf(&text, hwloc_topology_get_allowed_cpuset(topology));
  std::string list = text != nullptr ? text : "?";
  std::free(text);
  return list;
}

}  // namespace

std::size_t total_bytes(const std::vector<Region>& regions) {
  std::size_t bytes = 0;
  for (const Region& region : regions) bytes += region.bytes;
  return bytes;
}

Result<std::unique_ptr<OffloadEngine>> OffloadEngine::create(std::unique_ptr<Tier> tier,
                                                             const EngineOptions& options) {
  if (!tier) return error(StatusCode::invalid_argument, "offload engine: no tier given");
  if (options.bind_pu >= 0) {
    SPW_ASSIGN_OR_RETURN(const Topology* topology, Topology::process());
    if (hwloc_get_pu_obj_by_os_index(topology->handle(),
                                     static_cast<unsigned>(options.bind_pu)) == nullptr)
      return error(StatusCode::invalid_argument,
                   "offload engine: PU " + std::to_string(options.bind_pu) +
                       " does not exist on this node (PUs " + pu_list(topology->handle()) +
                       "): bind the engine thread to one of them or to -1 for none");
  }
  std::unique_ptr<OffloadEngine> engine(new OffloadEngine(std::move(tier), options));
  std::promise<void> started;
  std::future<void> bound = started.get_future();
  try {
    engine->thread_ = std::thread([raw = engine.get(), started = std::move(started)]() mutable {
      raw->bind_thread();
      started.set_value();
      raw->run();
    });
  } catch (const std::exception& e) {
    return error(StatusCode::internal,
                 std::string("offload engine: cannot start its thread: ") + e.what());
  }
  bound.wait();  // bound_pu() and cpus() are settled from here on
  return engine;
}

void OffloadEngine::bind_thread() {
  auto topology = Topology::process();
  if (!topology.ok()) {
    binding_note_ = "the node's topology is unknown (" + topology.status().message() + ")";
    return;
  }
  hwloc_topology_t handle = (*topology)->handle();
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  if (options_.bind_pu >= 0) {
    hwloc_bitmap_only(set, static_cast<unsigned>(options_.bind_pu));
    errno = 0;
    const int rc = hwloc_set_cpubind(handle, set, HWLOC_CPUBIND_THREAD);
    const int err = errno;
    if (rc == 0) {
      bound_pu_ = options_.bind_pu;
    } else {
      binding_note_ = "cannot bind the offload engine to PU " +
                      std::to_string(options_.bind_pu) + " (" + std::strerror(err) +
                      "): it runs unbound";
    }
  }
  if (hwloc_get_cpubind(handle, set, HWLOC_CPUBIND_THREAD) == 0) {
    for (int pu = hwloc_bitmap_first(set); pu >= 0; pu = hwloc_bitmap_next(set, pu)) {
      cpus_.push_back(pu);
    }
  }
  hwloc_bitmap_free(set);
}

OffloadEngine::~OffloadEngine() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status OffloadEngine::enqueue(Kind kind, std::uint64_t id, std::vector<Region> regions) {
  const std::string what = (kind == Kind::evict ? "evict of " : "prefetch of ") + stash(id);
  for (std::size_t i = 0; i < regions.size(); ++i)
    if (regions[i].data == nullptr && regions[i].bytes > 0)
      return error(StatusCode::invalid_argument, what + ": region " + std::to_string(i) +
                                                     " has " + std::to_string(regions[i].bytes) +
                                                     " bytes but no data");
  {
    std::lock_guard lock(mutex_);
    Entry& entry = entries_[id];
    if (kind == Kind::evict) {
      if (entry.evicted) {
        return error(StatusCode::invalid_argument,
                     what + ": it is already evicted; prefetch it before evicting it again");
      }
      entry.sizes.clear();
      for (const Region& region : regions) entry.sizes.push_back(region.bytes);
    } else {
      Status mismatch;
      if (!entry.evicted) {
        mismatch = error(StatusCode::invalid_argument,
                         what + ": it is not evicted (no evict since its last prefetch)");
      } else if (regions.size() != entry.sizes.size()) {
        mismatch = error(StatusCode::invalid_argument,
                         what + ": " + std::to_string(regions.size()) +
                             " regions, but it was evicted as " +
                             std::to_string(entry.sizes.size()));
      } else {
        for (std::size_t i = 0; i < regions.size() && mismatch.ok(); ++i)
          if (regions[i].bytes != entry.sizes[i])
            mismatch =
                error(StatusCode::invalid_argument, what + ": region " + std::to_string(i) +
                                                        " has " + std::to_string(regions[i].bytes) +
                                                        " bytes, but it was evicted with " +
                                                        std::to_string(entry.sizes[i]));
      }
      if (!mismatch.ok()) {
        forget_if_idle(id);
        return mismatch;
      }
    }
    entry.evicted = kind == Kind::evict;
    ++entry.pending;
    entry.last_seq = next_seq_;
    queue_.push_back(Request{kind, id, std::move(regions), next_seq_++});
  }
  work_.notify_one();
  return Status::success();
}

Status OffloadEngine::evict(std::uint64_t id, std::vector<Region> regions) {
  return enqueue(Kind::evict, id, std::move(regions));
}

Status OffloadEngine::prefetch(std::uint64_t id, std::vector<Region> regions) {
  return enqueue(Kind::prefetch, id, std::move(regions));
}

void OffloadEngine::run() {
  for (;;) {
    Request request;
    bool stored = false;
    std::vector<std::uint32_t> crcs;
    {
      std::unique_lock lock(mutex_);
      work_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) break;
      request = std::move(queue_.front());
      queue_.pop_front();
      const Entry& entry = entries_[request.id];
      stored = entry.stored;
      crcs = entry.crcs;
    }
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = thread_cpu_seconds();
    Status status;
    try {
      status = request.kind == Kind::evict ? execute_evict(request, crcs)
                                           : execute_prefetch(request, stored, crcs);
    } catch (const std::exception& e) {
      status = error(StatusCode::internal, std::string("offload engine: ") + e.what());
    }
    finish(request, std::move(status), seconds_since(start), thread_cpu_seconds() - cpu_start,
           std::move(crcs));
  }
  // Stopping: whatever has not started is cancelled, and nothing outlives the engine.
  std::lock_guard lock(mutex_);
  queue_.clear();
  for (auto& [id, entry] : entries_) {
    if (entry.stored) tier_->drop(id);
    entry.stored = false;
    entry.pending = 0;
  }
  finished_.notify_all();
}

Status OffloadEngine::execute_evict(const Request& request, std::vector<std::uint32_t>& crcs) {
  crcs.clear();
  if (options_.verify)
    for (const Region& region : request.regions) crcs.push_back(crc32c(region.data, region.bytes));
  const double copy_start = clock_seconds();
  Status status = tier_->store(request.id, request.regions);
  if (status.ok()) keep_transfer({copy_start, clock_seconds(), total_bytes(request.regions)});
  if (!status.ok())
    return status.with_context("evicting " + stash(request.id) + " to the " + tier_->name() +
                               " tier");
  return status;
}

Status OffloadEngine::execute_prefetch(const Request& request, bool stored,
                                       const std::vector<std::uint32_t>& crcs) {
  const std::string what =
      "prefetching " + stash(request.id) + " from the " + tier_->name() + " tier";
  if (!stored)
    return error(StatusCode::internal,
                 what + ": nothing is stored (its evict failed; wait() on it reported why)");
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = thread_cpu_seconds();
  populate(request.regions);
  {
    std::lock_guard lock(mutex_);
    stats_.map_seconds += seconds_since(start);
    stats_.map_cpu_seconds += thread_cpu_seconds() - cpu_start;
  }
  const double copy_start = clock_seconds();
  Status status = tier_->load(request.id, request.regions);
  if (status.ok()) keep_transfer({copy_start, clock_seconds(), total_bytes(request.regions)});
  tier_->drop(request.id);
  if (!status.ok()) return status.with_context(what);
  if (!options_.verify) return status;
  for (std::size_t i = 0; i < request.regions.size(); ++i) {
    const std::uint32_t got = crc32c(request.regions[i].data, request.regions[i].bytes);
    if (i < crcs.size() && got != crcs[i]) {
      char detail[96];
      std::snprintf(detail, sizeof detail, "CRC32C of region %zu is 0x%08X, evicted as 0x%08X", i,
                    static_cast<unsigned>(got), static_cast<unsigned>(crcs[i]));
      return error(StatusCode::io_error,
                   what + ": " + detail + ": the stored copy was corrupted");
    }
  }
  return status;
}

void OffloadEngine::finish(const Request& request, Status status, double seconds,
                           double cpu_seconds, std::vector<std::uint32_t> crcs) {
  {
    std::lock_guard lock(mutex_);
    Entry& entry = entries_[request.id];
    const std::size_t bytes = total_bytes(request.regions);
    if (request.kind == Kind::evict) {
      stats_.evict_seconds += seconds;
      stats_.evict_cpu_seconds += cpu_seconds;
      entry.stored = status.ok();
      if (status.ok()) {
        entry.crcs = std::move(crcs);
        stats_.bytes_evicted += bytes;
        ++stats_.evictions;
      } else if (entry.last_seq == request.seq) {
        entry.evicted = false;  // nothing follows: the caller may keep it resident or retry
      }
    } else {
      stats_.prefetch_seconds += seconds;
      stats_.prefetch_cpu_seconds += cpu_seconds;
      entry.stored = false;
      entry.crcs.clear();
      if (status.ok()) {
        stats_.bytes_prefetched += bytes;
        ++stats_.prefetches;
      }
    }
    if (!status.ok() && entry.first_error.ok()) entry.first_error = std::move(status);
    --entry.pending;
    forget_if_idle(request.id);
  }
  finished_.notify_all();
}

void OffloadEngine::forget_if_idle(std::uint64_t id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  const Entry& entry = it->second;
  if (entry.pending == 0 && !entry.evicted && !entry.stored && entry.first_error.ok())
    entries_.erase(it);
}

Status OffloadEngine::wait(std::uint64_t id, double* waited_s) {
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock lock(mutex_);
  finished_.wait(lock, [&] {
    auto it = entries_.find(id);
    return it == entries_.end() || it->second.pending == 0 || stopping_;
  });
  if (waited_s != nullptr) *waited_s = seconds_since(start);
  auto it = entries_.find(id);
  if (it == entries_.end()) return Status::success();
  Status status = std::exchange(it->second.first_error, Status::success());
  forget_if_idle(id);
  return status;
}

bool OffloadEngine::done(std::uint64_t id) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(id);
  return it == entries_.end() || it->second.pending == 0;
}

void OffloadEngine::keep_transfer(const EngineTransfer& transfer) {
  std::lock_guard lock(mutex_);
  if (transfers_.size() == kKeptTransfers) transfers_.pop_front();
  transfers_.push_back(transfer);
}

std::vector<EngineTransfer> OffloadEngine::transfers() const {
  std::lock_guard lock(mutex_);
  return {transfers_.begin(), transfers_.end()};
}

EngineStats OffloadEngine::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace spw::offload
