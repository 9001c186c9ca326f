#include "offload/file_tier.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace spw::offload {

namespace {

// O_DIRECT wants offsets, lengths and buffers aligned to the logical block; a page covers
// every common device.
constexpr std::size_t kBlock = 4096;

std::size_t round_up(std::size_t bytes) { return (bytes + kBlock - 1) / kBlock * kBlock; }

Status check_directory(const std::string& dir, const std::string& origin) {
  struct stat info {};
  if (::stat(dir.c_str(), &info) != 0) {
    const int err = errno;
    return error(err == ENOENT ? StatusCode::not_found : StatusCode::io_error,
                 "offload directory " + dir + origin + " cannot be used (" + std::strerror(err) +
                     "): create it or set offload.dir to a directory on node-local storage");
  }
  if (!S_ISDIR(info.st_mode))
    return error(StatusCode::io_error, "offload directory " + dir + origin +
                                           " is not a directory: set offload.dir to a directory");
  return Status::success();
}

}  // namespace

Result<std::string> default_offload_dir() {
  for (const char* variable : {"SLURM_TMPDIR", "TMPDIR"}) {
    const char* value = std::getenv(variable);
    if (value == nullptr || *value == '\0') continue;
    SPW_TRY(check_directory(value, std::string(" (from $") + variable + ")"));
    return std::string(value);
  }
  SPW_TRY(check_directory("/tmp", ""));
  return std::string("/tmp");
}

int FileTier::open_file(bool direct) const {
  const int flags = O_RDWR | O_CLOEXEC | (direct ? O_DIRECT : 0);
  int fd = ::open(dir_.c_str(), flags | O_TMPFILE, 0600);
  if (fd >= 0) return fd;
  // File systems without O_TMPFILE (some parallel ones) report it in several ways; a named
  // file unlinked at once is as good.
  if (errno != EOPNOTSUPP && errno != EISDIR && errno != ENOENT) return -errno;
  std::string pattern = dir_ + "/spillway-stash-XXXXXX";
  fd = ::mkostemp(pattern.data(), O_CLOEXEC | (direct ? O_DIRECT : 0));
  if (fd < 0) return -errno;
  ::unlink(pattern.c_str());
  return fd;
}

Result<std::unique_ptr<FileTier>> FileTier::create(const std::string& dir,
                                                   std::size_t staging_bytes) {
  std::string path = dir;
  if (path.empty()) {
    SPW_ASSIGN_OR_RETURN(path, default_offload_dir());
  } else {
    SPW_TRY(check_directory(path, ""));
  }
  SPW_ASSIGN_OR_RETURN(
      auto staging, allocate(round_up(std::max(staging_bytes, kBlock)),
                             MemoryCategory::offload_staging, MemoryPlacement::local(),
                             FirstTouch::none));
  std::unique_ptr<FileTier> tier(new FileTier(path, true, std::move(staging)));

  // Probe with one block: proves the directory writable and tells whether O_DIRECT works
  // there (tmpfs and some network file systems refuse it at open or at the first write).
  std::memset(tier->staging_->data(), 0, kBlock);
  for (const bool direct : {true, false}) {
    const int fd = tier->open_file(direct);
    int err = fd < 0 ? -fd : 0;
    if (err == 0) {
      const ssize_t written = ::pwrite(fd, tier->staging_->data(), kBlock, 0);
      err = written == static_cast<ssize_t>(kBlock) ? 0 : written < 0 ? errno : ENOSPC;
      ::close(fd);
    }
    if (err == 0) {
      tier->direct_ = direct;
      return tier;
    }
    if (!(direct && err == EINVAL))
      return error(StatusCode::io_error,
                   "offload directory " + path + " is not writable (" + std::strerror(err) +
                       "): set offload.dir to a writable directory on node-local storage");
  }
  return error(StatusCode::internal, "offload directory " + path + ": probe fell through");
}

FileTier::~FileTier() {
  for (auto& [id, file] : files_) ::close(file.fd);
}

Status FileTier::write_block(int fd, std::size_t length, std::size_t offset, std::uint64_t id) {
  const auto* data = static_cast<const unsigned char*>(staging_->data());
  for (std::size_t done = 0; done < length;) {
    const ssize_t n = ::pwrite(fd, data + done, length - done, static_cast<off_t>(offset + done));
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    const int err = n < 0 ? errno : ENOSPC;  // a write of nothing means the device is full
    if (err == EINTR) continue;
    return error(StatusCode::io_error,
                 "writing stash " + std::to_string(id) + " to a file in " + dir_ + " failed at byte " +
                     std::to_string(offset + done) + " (" + std::strerror(err) +
                     "): free space there or set offload.dir to a larger file system");
  }
  return Status::success();
}

Status FileTier::read_block(int fd, std::size_t length, std::size_t offset, std::uint64_t id) {
  auto* data = static_cast<unsigned char*>(staging_->data());
  for (std::size_t done = 0; done < length;) {
    const ssize_t n = ::pread(fd, data + done, length - done, static_cast<off_t>(offset + done));
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return error(StatusCode::io_error,
                 "reading stash " + std::to_string(id) + " from its file in " + dir_ +
                     " failed at byte " + std::to_string(offset + done) + " (" +
                     (n < 0 ? std::strerror(errno) : "the file is shorter than written") + ")");
  }
  return Status::success();
}

Status FileTier::store(std::uint64_t id, const std::vector<Region>& regions) {
  drop(id);
  const int fd = open_file(direct_);
  if (fd < 0)
    return error(StatusCode::io_error, "cannot create a stash file in " + dir_ + " (" +
                                           std::strerror(-fd) + ")");
  // Regions are packed back to back; each staging block goes out whole (zero-padded at the
  // end), which keeps every O_DIRECT write aligned.
  const std::size_t block = staging_->bytes();
  auto* staging = static_cast<unsigned char*>(staging_->data());
  std::size_t filled = 0, offset = 0;
  for (const Region& region : regions) {
    const auto* source = static_cast<const unsigned char*>(region.data);
    for (std::size_t copied = 0; copied < region.bytes;) {
      const std::size_t n = std::min(block - filled, region.bytes - copied);
      std::memcpy(staging + filled, source + copied, n);
      filled += n;
      copied += n;
      if (filled < block) continue;
      if (Status s = write_block(fd, block, offset, id); !s.ok()) {
        ::close(fd);  // the file has no name: closing frees what was written
        return s;
      }
      offset += block;
      filled = 0;
    }
  }
  if (filled > 0) {
    std::memset(staging + filled, 0, round_up(filled) - filled);
    if (Status s = write_block(fd, round_up(filled), offset, id); !s.ok()) {
      ::close(fd);
      return s;
    }
  }
  files_[id] = File{fd, total_bytes(regions)};
  return Status::success();
}

Status FileTier::load(std::uint64_t id, const std::vector<Region>& regions) {
  auto it = files_.find(id);
  if (it == files_.end())
    return error(StatusCode::internal, "file tier holds no stash " + std::to_string(id));
  const File& file = it->second;
  if (total_bytes(regions) != file.bytes)
    return error(StatusCode::invalid_argument,
                 "stash " + std::to_string(id) + " was stored with " + std::to_string(file.bytes) +
                     " bytes, asked back into " + std::to_string(total_bytes(regions)));
  const std::size_t block = staging_->bytes();
  const auto* staging = static_cast<const unsigned char*>(staging_->data());
  std::size_t available = 0, used = 0, offset = 0;
  for (const Region& region : regions) {
    auto* target = static_cast<unsigned char*>(region.data);
    for (std::size_t copied = 0; copied < region.bytes;) {
      if (used == available) {
        const std::size_t length = std::min(block, round_up(file.bytes - offset));
        SPW_TRY(read_block(file.fd, length, offset, id));
        offset += length;
        available = length;
        used = 0;
      }
      const std::size_t n = std::min(available - used, region.bytes - copied);
      std::memcpy(target + copied, staging + used, n);
      used += n;
      copied += n;
    }
  }
  return Status::success();
}

void FileTier::drop(std::uint64_t id) {
  auto it = files_.find(id);
  if (it == files_.end()) return;
  ::close(it->second.fd);
  files_.erase(it);
}

std::string FileTier::file_of(std::uint64_t id) const {
  auto it = files_.find(id);
  return it == files_.end() ? "" : "/proc/self/fd/" + std::to_string(it->second.fd);
}

Result<std::unique_ptr<Tier>> make_file_tier(const std::string& dir) {
  SPW_ASSIGN_OR_RETURN(auto tier, FileTier::create(dir));
  return std::unique_ptr<Tier>(std::move(tier));
}

}  // namespace spw::offload
