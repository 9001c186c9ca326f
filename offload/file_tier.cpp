#include "offload/file_tier.hpp"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

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

FileTier::File FileTier::lay_out(const std::vector<Region>& regions) const {
  // Without O_DIRECT any address and offset will do: every byte is body.
  const std::size_t unit = direct_ ? kBlock : 1;
  File file;
  file.pieces.reserve(regions.size());
  std::size_t body_end = 0;
  for (const Region& region : regions) {
    Piece piece;
    piece.bytes = region.bytes;
    const std::size_t phase = reinterpret_cast<std::uintptr_t>(region.data) % unit;
    piece.head = std::min(region.bytes, (unit - phase) % unit);
    piece.body = (region.bytes - piece.head) / unit * unit;
    piece.body_offset = body_end;
    body_end += piece.body;
    file.bytes += region.bytes;
    file.pieces.push_back(piece);
  }
  for (Piece& piece : file.pieces) {
    piece.small_offset = body_end + file.small_bytes;
    file.small_bytes += piece.bytes - piece.body;
  }
  return file;
}

namespace {

// One pwritev / preadv moves at most this much, well under the kernel's ~2 GiB per call.
constexpr std::size_t kMaxCall = std::size_t{1} << 30;

// Drops the first `n` bytes of `iov` from position `first` on; returns the new first entry.
std::size_t advance(std::vector<struct iovec>& iov, std::size_t first, std::size_t n) {
  while (n > 0 && first < iov.size()) {
    const std::size_t step = std::min(n, iov[first].iov_len);
    iov[first].iov_base = static_cast<unsigned char*>(iov[first].iov_base) + step;
    iov[first].iov_len -= step;
    n -= step;
    if (iov[first].iov_len == 0) ++first;
  }
  return first;
}

// The entries from `first` on that one call takes: at most IOV_MAX and about kMaxCall bytes.
int batch(const std::vector<struct iovec>& iov, std::size_t first) {
  std::size_t count = 0, bytes = 0;
  while (first + count < iov.size() && count < IOV_MAX && bytes < kMaxCall)
    bytes += iov[first + count++].iov_len;
  return static_cast<int>(count);
}

// Moves all of `iov` at file offset `offset`; the offset where it stopped and errno (ENOSPC
// for a write of nothing, ENODATA for a read past the end) on failure.
int move_all(bool write, int fd, std::vector<struct iovec>& iov, std::size_t& offset) {
  std::size_t first = advance(iov, 0, 0);
  while (first < iov.size()) {
    const int count = batch(iov, first);
    const ssize_t n = write ? ::pwritev(fd, &iov[first], count, static_cast<off_t>(offset))
                            : ::preadv(fd, &iov[first], count, static_cast<off_t>(offset));
    if (n > 0) {
      offset += static_cast<std::size_t>(n);
      first = advance(iov, first, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 ? errno : write ? ENOSPC : ENODATA;  // a write of nothing: the device is full
  }
  return 0;
}

}  // namespace

Status FileTier::write_all(int fd, std::vector<struct iovec> iov, std::size_t offset,
                           std::uint64_t id) {
  const int err = move_all(true, fd, iov, offset);
  if (err == 0) return Status::success();
  return error(StatusCode::io_error,
               "writing stash " + std::to_string(id) + " to a file in " + dir_ +
                   " failed at byte " + std::to_string(offset) + " (" + std::strerror(err) +
                   "): free space there or set offload.dir to a larger file system");
}

Status FileTier::read_all(int fd, std::vector<struct iovec> iov, std::size_t offset,
                          std::uint64_t id) {
  const int err = move_all(false, fd, iov, offset);
  if (err == 0) return Status::success();
  return error(StatusCode::io_error,
               "reading stash " + std::to_string(id) + " from its file in " + dir_ +
                   " failed at byte " + std::to_string(offset) + " (" +
                   (err == ENODATA ? "the file is shorter than written" : std::strerror(err)) +
                   ")");
}

// Heads and rests, packed back to back through staging. Each staging block goes out whole
// (zero-padded at the end), which keeps every O_DIRECT write aligned.
Status FileTier::move_small(bool write, const File& file, const std::vector<Region>& regions,
                            std::uint64_t id) {
  if (file.small_bytes == 0) return Status::success();
  const std::size_t start = file.pieces.front().small_offset;
  auto* staging = static_cast<unsigned char*>(staging_->data());
  std::size_t block = write ? staging_->bytes() : 0;  // bytes of staging in use
  std::size_t used = 0, done = 0;                     // of the block; of the section
  for (std::size_t i = 0; i < regions.size(); ++i) {
    const Piece& piece = file.pieces[i];
    auto* data = static_cast<unsigned char*>(regions[i].data);
    const std::pair<unsigned char*, std::size_t> parts[] = {
        {data, piece.head},
        {data + piece.head + piece.body, piece.bytes - piece.head - piece.body}};
    for (const auto& [bytes, length] : parts) {
      for (std::size_t copied = 0; copied < length;) {
        if (!write && used == block) {
          block = std::min(staging_->bytes(), round_up(file.small_bytes - done));
          SPW_TRY(read_all(file.fd, {{staging, block}}, start + done, id));
          used = 0;
        }
        const std::size_t n = std::min(block - used, length - copied);
        if (write) std::memcpy(staging + used, bytes + copied, n);
        else std::memcpy(bytes + copied, staging + used, n);
        used += n;
        copied += n;
        done += n;
        if (write && used == block) {
          SPW_TRY(write_all(file.fd, {{staging, block}}, start + done - block, id));
          used = 0;
        }
      }
    }
  }
  if (!write || used == 0) return Status::success();
  std::memset(staging + used, 0, round_up(used) - used);
  return write_all(file.fd, {{staging, round_up(used)}}, start + done - used, id);
}

// Pages whose memory is aligned as they were at store move straight into place, consecutive
// ones in one call; the others come through staging.
Status FileTier::read_bodies(const File& file, const std::vector<Region>& regions,
                             std::uint64_t id) {
  const std::size_t unit = direct_ ? kBlock : 1;
  std::vector<struct iovec> run;
  std::size_t run_offset = 0;
  auto* staging = static_cast<unsigned char*>(staging_->data());
  for (std::size_t i = 0; i < regions.size(); ++i) {
    const Piece& piece = file.pieces[i];
    if (piece.body == 0) continue;
    auto* body = static_cast<unsigned char*>(regions[i].data) + piece.head;
    if (reinterpret_cast<std::uintptr_t>(body) % unit == 0) {
      if (run.empty()) run_offset = piece.body_offset;
      run.push_back({body, piece.body});
      continue;
    }
    SPW_TRY(read_all(file.fd, std::exchange(run, {}), run_offset, id));
    for (std::size_t copied = 0; copied < piece.body;) {
      const std::size_t n = std::min(staging_->bytes(), piece.body - copied);
      SPW_TRY(read_all(file.fd, {{staging, n}}, piece.body_offset + copied, id));
      std::memcpy(body + copied, staging, n);
      copied += n;
    }
  }
  return read_all(file.fd, std::move(run), run_offset, id);
}

Status FileTier::store(std::uint64_t id, const std::vector<Region>& regions) {
  drop(id);
  File file = lay_out(regions);
  file.fd = open_file(direct_);
  if (file.fd < 0)
    return error(StatusCode::io_error, "cannot create a stash file in " + dir_ + " (" +
                                           std::strerror(-file.fd) + ")");
  std::vector<struct iovec> bodies;
  for (std::size_t i = 0; i < regions.size(); ++i) {
    const Piece& piece = file.pieces[i];
    if (piece.body > 0)
      bodies.push_back({static_cast<unsigned char*>(regions[i].data) + piece.head, piece.body});
  }
  Status status = write_all(file.fd, std::move(bodies), 0, id);
  if (status.ok()) status = move_small(true, file, regions, id);
  if (!status.ok()) {
    ::close(file.fd);  // the file has no name: closing frees what was written
    return status;
  }
  files_[id] = std::move(file);
  return Status::success();
}

Status FileTier::load(std::uint64_t id, const std::vector<Region>& regions) {
  auto it = files_.find(id);
  if (it == files_.end())
    return error(StatusCode::internal, "file tier holds no stash " + std::to_string(id));
  const File& file = it->second;
  bool same = regions.size() == file.pieces.size();
  for (std::size_t i = 0; same && i < regions.size(); ++i)
    same = regions[i].bytes == file.pieces[i].bytes;
  if (!same)
    return error(StatusCode::invalid_argument,
                 "stash " + std::to_string(id) + " was stored as " +
                     std::to_string(file.pieces.size()) + " regions of " +
                     std::to_string(file.bytes) + " bytes, asked back into " +
                     std::to_string(regions.size()) + " of " +
                     std::to_string(total_bytes(regions)) + " (each region its stored size)");
  SPW_TRY(read_bodies(file, regions, id));
  return move_small(false, file, regions, id);
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

std::int64_t FileTier::file_offset_of(std::uint64_t id, std::size_t region,
                                      std::size_t byte) const {
  auto it = files_.find(id);
  if (it == files_.end() || region >= it->second.pieces.size()) return -1;
  const Piece& piece = it->second.pieces[region];
  if (byte >= piece.bytes) return -1;
  std::size_t at = piece.small_offset + byte;  // in the head
  if (byte >= piece.head + piece.body) at = piece.small_offset + byte - piece.body;  // the rest
  else if (byte >= piece.head) at = piece.body_offset + byte - piece.head;
  return static_cast<std::int64_t>(at);
}

Result<std::unique_ptr<Tier>> make_file_tier(const std::string& dir) {
  SPW_ASSIGN_OR_RETURN(auto tier, FileTier::create(dir));
  return std::unique_ptr<Tier>(std::move(tier));
}

}  // namespace spw::offload
