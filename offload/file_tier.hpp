// The file tier: stashes in files on node-local storage or a burst buffer, so the memory they
// held really goes back to the system while they are away.
//
// Each stash is one file. With O_DIRECT (where the file system takes it, so the data neither
// lingers in the page cache nor costs the rank's core a copy) the whole pages of every region
// go straight between the tensors and the file, all of a stash's in one pwritev / preadv so
// the device has them in flight together; only the bytes before a region's first page
// boundary and after its last (none for page-sized tensors) go through a page-aligned staging
// buffer (accounted as offload_staging in the rank's ledger), packed after the pages. A load
// into memory aligned differently from the store reads those pages through staging too.
// Without O_DIRECT every region goes straight through the page cache. The files have no name:
// they are made with O_TMPFILE (or created and unlinked at once where that is unsupported),
// so the kernel frees them when the tier closes them or the process ends in any way,
// MPI_Abort and SIGKILL included; nothing is left to clean up after a failed job.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/numa_allocator.hpp"
#include "kernels/status.hpp"
#include "offload/tier.hpp"

namespace spw::offload {

// $SLURM_TMPDIR, else $TMPDIR, else /tmp (variables set but empty are skipped). not_found,
// naming the directory and where it came from, when it does not exist.
Result<std::string> default_offload_dir();

class FileTier final : public Tier {
 public:
  static constexpr std::size_t kDefaultStagingBytes = std::size_t{4} << 20;

  // `dir` empty: default_offload_dir(). not_found / io_error naming the directory when it is
  // missing, not a directory or not writable; out_of_memory or memory_cap for the staging
  // buffer.
  static Result<std::unique_ptr<FileTier>> create(const std::string& dir,
                                                  std::size_t staging_bytes = kDefaultStagingBytes);
  ~FileTier() override;

  const char* name() const override { return "file"; }
  // io_error naming the directory on ENOSPC, any failed or empty write; nothing stays stored.
  Status store(std::uint64_t id, const std::vector<Region>& regions) override;
  Status load(std::uint64_t id, const std::vector<Region>& regions) override;
  void drop(std::uint64_t id) override;

  const std::string& directory() const { return dir_; }
  bool direct_io() const { return direct_; }
  // A path that opens the stored file of `id` (/proc/self/fd/N, it has no name), or "".
  std::string file_of(std::uint64_t id) const;
  // Where byte `byte` of region `region` of stash `id` is in that file, or -1.
  std::int64_t file_offset_of(std::uint64_t id, std::size_t region, std::size_t byte) const;

 private:
  // Where one region's bytes are in its file: `head` bytes up to its first block boundary
  // at store, then `body` whole blocks at `body_offset`, then the rest; head and rest are
  // packed at `small_offset`.
  struct Piece {
    std::size_t bytes = 0, head = 0, body = 0;
    std::size_t body_offset = 0, small_offset = 0;
  };
  struct File {
    int fd = -1;
    std::size_t bytes = 0;  // payload
    std::vector<Piece> pieces;
    std::size_t small_bytes = 0;  // heads and rests, after the bodies
  };
  FileTier(std::string dir, bool direct, std::unique_ptr<Allocation> staging)
      : dir_(std::move(dir)), direct_(direct), staging_(std::move(staging)) {}
  int open_file(bool direct) const;  // an unnamed file in dir_, or -errno
  File lay_out(const std::vector<Region>& regions) const;
  // All of `iov` from file offset `offset` on; io_error naming the stash and the byte.
  Status write_all(int fd, std::vector<struct iovec> iov, std::size_t offset, std::uint64_t id);
  Status read_all(int fd, std::vector<struct iovec> iov, std::size_t offset, std::uint64_t id);
  Status move_small(bool write, const File& file, const std::vector<Region>& regions,
                    std::uint64_t id);
  Status read_bodies(const File& file, const std::vector<Region>& regions, std::uint64_t id);

  std::string dir_;
  bool direct_;
  std::unique_ptr<Allocation> staging_;
  std::unordered_map<std::uint64_t, File> files_;
};

// FileTier::create(dir) as a Tier.
Result<std::unique_ptr<Tier>> make_file_tier(const std::string& dir);

}  // namespace spw::offload
