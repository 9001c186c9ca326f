// The file tier's failures are found early and named: a missing, misplaced or read-only
// directory at creation, a full disk when storing (with the stash left intact and the space
// given back). Its files have no name and their space is freed when the tier goes.
//
// The full-disk and read-only cases mount a small private tmpfs, the case without O_DIRECT a
// ramfs (tests run as root here); where mounting is not allowed they are skipped, saying why.
// Round trips compare every byte: regions whose pages go straight to the file, regions with
// unaligned ends that go through staging, and loads into memory aligned unlike the store.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "offload/engine.hpp"
#include "offload/file_tier.hpp"

namespace spw::offload {
namespace {

namespace fs = std::filesystem;

// A tmpfs of `size` mounted on a fresh directory for one test.
class ScratchMount {
 public:
  ScratchMount(const char* size, bool read_only, const char* type = "tmpfs") {
    char pattern[] = "/tmp/spw-offload-mount-XXXXXX";
    if (::mkdtemp(pattern) == nullptr) {
      why_ = std::strerror(errno);
      return;
    }
    path_ = pattern;
    const std::string options = std::string("size=") + size;
    if (::mount(type, path_.c_str(), type, read_only ? MS_RDONLY : 0, options.c_str()) != 0)
      why_ = std::string("cannot mount a ") + type + " here (" + std::strerror(errno) + ")";
  }
  ~ScratchMount() {
    if (why_.empty()) ::umount2(path_.c_str(), MNT_DETACH);
    if (!path_.empty()) ::rmdir(path_.c_str());
  }
  bool mounted() const { return why_.empty(); }
  const std::string& why() const { return why_; }
  const std::string& path() const { return path_; }
  std::size_t free_bytes() const {
    struct statvfs info {};
    ::statvfs(path_.c_str(), &info);
    return info.f_bavail * info.f_frsize;
  }

 private:
  std::string path_, why_;
};

std::vector<Region> regions_of(std::vector<unsigned char>& bytes) {
  return {{bytes.data(), bytes.size()}};
}

// Page-aligned memory, as tensors have, holding regions at chosen offsets from page starts.
class PageMemory {
 public:
  explicit PageMemory(std::size_t bytes)
      : data_(static_cast<unsigned char*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096))) {
  }
  ~PageMemory() { std::free(data_); }
  PageMemory(const PageMemory&) = delete;
  PageMemory& operator=(const PageMemory&) = delete;
  unsigned char* at(std::size_t offset) { return data_ + offset; }

 private:
  unsigned char* data_;
};

// `sizes[i]` bytes at `offsets[i]` of `memory`, filled from `seed` (0: zeroed).
std::vector<Region> place(PageMemory& memory, const std::vector<std::size_t>& offsets,
                          const std::vector<std::size_t>& sizes, unsigned seed) {
  std::vector<Region> regions;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    unsigned char* data = memory.at(offsets[i]);
    for (std::size_t b = 0; b < sizes[i]; ++b)
      data[b] = seed == 0 ? 0 : static_cast<unsigned char>((b * 131 + i * 7 + seed) % 251);
    regions.push_back({data, sizes[i]});
  }
  return regions;
}

bool same_bytes(const std::vector<Region>& a, const std::vector<Region>& b) {
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].bytes != b[i].bytes || std::memcmp(a[i].data, b[i].data, a[i].bytes) != 0)
      return false;
  return true;
}

off_t size_of(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 ? info.st_size : -1;
}

TEST(FileTier, MissingDirectoryIsNamedAtCreation) {
  auto tier = make_file_tier("/nonexistent/spillway-offload");
  ASSERT_FALSE(tier.ok());
  EXPECT_EQ(tier.status().code(), StatusCode::not_found);
  EXPECT_EQ(tier.status().message(),
            "offload directory /nonexistent/spillway-offload cannot be used (No such file or "
            "directory): create it or set offload.dir to a directory on node-local storage");
}

TEST(FileTier, APathUnderARegularFileIsRefusedEvenForRoot) {
  const std::string file =
      fs::temp_directory_path() / ("spw-offload-file-" + std::to_string(::getpid()));
  std::ofstream(file) << "x";
  auto under = make_file_tier(file + "/stashes");
  auto itself = make_file_tier(file);
  fs::remove(file);
  ASSERT_FALSE(under.ok());
  EXPECT_EQ(under.status().message(),
            "offload directory " + file + "/stashes cannot be used (Not a directory): create it "
            "or set offload.dir to a directory on node-local storage");
  ASSERT_FALSE(itself.ok());
  EXPECT_EQ(itself.status().message(),
            "offload directory " + file + " is not a directory: set offload.dir to a directory");
}

TEST(FileTier, AReadOnlyDirectoryIsRefusedAtCreation) {
  ScratchMount mount("64k", true);
  if (!mount.mounted()) GTEST_SKIP() << mount.why();
  auto tier = make_file_tier(mount.path());
  ASSERT_FALSE(tier.ok());
  EXPECT_EQ(tier.status().code(), StatusCode::io_error);
  EXPECT_EQ(tier.status().message(),
            "offload directory " + mount.path() +
                " is not writable (Read-only file system): set offload.dir to a writable "
                "directory on node-local storage");
}

TEST(FileTier, AFullDiskFailsTheEvictNamingThePathAndKeepsTheStash) {
  ScratchMount mount("256k", false);
  if (!mount.mounted()) GTEST_SKIP() << mount.why();
  auto tier = FileTier::create(mount.path(), 64 << 10);
  ASSERT_TRUE(tier.ok()) << tier.status().message();
  auto engine = OffloadEngine::create(std::move(tier).value(), {true, -1});
  ASSERT_TRUE(engine.ok());
  const std::size_t free_before = mount.free_bytes();

  std::vector<unsigned char> big(1 << 20, 0x3C);
  ASSERT_TRUE((*engine)->evict(1, regions_of(big)).ok());
  Status status = (*engine)->wait(1);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::io_error);
  EXPECT_EQ(
      status.message().rfind("evicting stash 1 to the file tier: writing stash 1 to a file in " +
                                 mount.path() + " failed at byte ",
                             0),
      0u)
      << status.message();
  EXPECT_NE(status.message().find("(No space left on device): free space there or set "
                                  "offload.dir to a larger file system"),
            std::string::npos)
      << status.message();
  EXPECT_EQ(big, std::vector<unsigned char>(1 << 20, 0x3C));
  EXPECT_EQ(mount.free_bytes(), free_before);  // the partial file is gone

  // What fits still goes out and comes back.
  std::vector<unsigned char> small(100000, 0x11);
  ASSERT_TRUE((*engine)->evict(2, regions_of(small)).ok());
  ASSERT_TRUE((*engine)->wait(2).ok());
  std::fill(small.begin(), small.end(), 0);
  ASSERT_TRUE((*engine)->prefetch(2, regions_of(small)).ok());
  ASSERT_TRUE((*engine)->wait(2).ok());
  EXPECT_EQ(small, std::vector<unsigned char>(100000, 0x11));
}

TEST(FileTier, FilesHaveNoNameAndTheirSpaceIsFreedWithTheTier) {
  ScratchMount mount("4m", false);
  if (!mount.mounted()) GTEST_SKIP() << mount.why();
  const std::size_t free_before = mount.free_bytes();
  {
    auto tier = FileTier::create(mount.path());
    ASSERT_TRUE(tier.ok()) << tier.status().message();
    std::vector<unsigned char> a(1 << 20, 1), b(1 << 19, 2);
    ASSERT_TRUE((*tier)->store(1, regions_of(a)).ok());
    ASSERT_TRUE((*tier)->store(2, regions_of(b)).ok());
    EXPECT_LE(mount.free_bytes(), free_before - (3u << 19));
    EXPECT_TRUE(fs::is_empty(mount.path()));  // nothing to leave behind if the job is killed
    (*tier)->drop(2);
    EXPECT_GE(mount.free_bytes(), free_before - (1u << 20) - 8192);
  }
  EXPECT_EQ(mount.free_bytes(), free_before);
}

TEST(FileTier, WholePagesGoStraightToTheFileAndComeBackEqual) {
  auto tier = FileTier::create("", 64 << 10);
  ASSERT_TRUE(tier.ok()) << tier.status().message();
  if (!(*tier)->direct_io()) GTEST_SKIP() << (*tier)->directory() << " refuses O_DIRECT";
  const std::vector<std::size_t> offsets = {0, 1 << 20, 2 << 20},
                                 sizes = {4096, 300 << 10, 1 << 20};
  PageMemory memory(3 << 20), back(3 << 20);
  const std::vector<Region> stash = place(memory, offsets, sizes, 1);
  ASSERT_TRUE((*tier)->store(1, stash).ok());
  // Page-sized regions need no staging: the file holds their bytes and nothing else.
  EXPECT_EQ(size_of((*tier)->file_of(1)), static_cast<off_t>(4096 + (300 << 10) + (1 << 20)));
  EXPECT_EQ((*tier)->file_offset_of(1, 2, 5), static_cast<std::int64_t>(4096 + (300 << 10) + 5));
  const std::vector<Region> into = place(back, offsets, sizes, 0);
  const Status loaded = (*tier)->load(1, into);
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  EXPECT_TRUE(same_bytes(stash, into));
}

TEST(FileTier, UnalignedEndsGoThroughStagingAndAnyAlignmentLoadsBack) {
  // A staging buffer of one page: the ends of 6 regions take several blocks.
  auto tier = FileTier::create("", 4096);
  ASSERT_TRUE(tier.ok()) << tier.status().message();
  const std::vector<std::size_t> sizes = {1, 4095, 0, 3 * 4096 + 100, 20000, 2 * 4096};
  const std::vector<std::size_t> stored_at = {0, 8192, 16384, 24576 + 7, 65536 + 4000, 98304 + 1};
  PageMemory memory(1 << 17);
  const std::vector<Region> stash = place(memory, stored_at, sizes, 3);
  ASSERT_TRUE((*tier)->store(5, stash).ok());
  // Back into the same alignment (pages read in place) and into memory shifted against the
  // store (pages through staging), each compared byte for byte.
  const std::vector<std::vector<std::size_t>> loads = {
      stored_at, {5, 8192 + 3, 16384, 24576 + 4090, 65536, 98304}};
  for (const auto& offsets : loads) {
    PageMemory back(1 << 17);
    const std::vector<Region> into = place(back, offsets, sizes, 0);
    const Status loaded = (*tier)->load(5, into);
    ASSERT_TRUE(loaded.ok()) << loaded.message();
    EXPECT_TRUE(same_bytes(stash, into)) << "loaded at offset " << offsets[3] << " of a page";
  }
  // Regions of other sizes are refused, naming both layouts.
  PageMemory other(1 << 17);
  const Status wrong = (*tier)->load(5, place(other, {0, 8192}, {1, 4095}, 0));
  EXPECT_EQ(wrong.code(), StatusCode::invalid_argument);
  EXPECT_EQ(wrong.message(), "stash 5 was stored as 6 regions of 44676 bytes, asked back into 2 "
                             "of 4096 (each region its stored size)");
}

TEST(FileTier, WithoutODirectEveryRegionGoesThroughThePageCache) {
  ScratchMount mount("0", false, "ramfs");  // ramfs refuses O_DIRECT at open
  if (!mount.mounted()) GTEST_SKIP() << mount.why();
  auto tier = FileTier::create(mount.path(), 4096);
  ASSERT_TRUE(tier.ok()) << tier.status().message();
  EXPECT_FALSE((*tier)->direct_io());
  const std::vector<std::size_t> sizes = {3, 5 * 4096 + 11, 70000};
  PageMemory memory(1 << 18), back(1 << 18);
  const std::vector<Region> stash = place(memory, {100, 4096, 40960 + 9}, sizes, 4);
  ASSERT_TRUE((*tier)->store(2, stash).ok());
  // Packed back to back, no padding: nothing has to be aligned.
  EXPECT_EQ(size_of((*tier)->file_of(2)), static_cast<off_t>(3 + 5 * 4096 + 11 + 70000));
  const std::vector<Region> into = place(back, {0, 8192 + 1, 65536}, sizes, 0);
  const Status loaded = (*tier)->load(2, into);
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  EXPECT_TRUE(same_bytes(stash, into));
}

TEST(FileTier, DefaultDirectoryFollowsSlurmThenTmpdirThenTmp) {
  const std::string here = fs::temp_directory_path();
  const char* saved_slurm = std::getenv("SLURM_TMPDIR");
  const char* saved_tmp = std::getenv("TMPDIR");
  const std::string slurm = saved_slurm ? saved_slurm : "", tmp = saved_tmp ? saved_tmp : "";

  ::setenv("SLURM_TMPDIR", "/", 1);
  ::setenv("TMPDIR", "/nonexistent", 1);
  EXPECT_EQ(*default_offload_dir(), "/");
  ::setenv("SLURM_TMPDIR", "", 1);  // set but empty: skipped
  auto missing = default_offload_dir();
  EXPECT_EQ(missing.status().message(),
            "offload directory /nonexistent (from $TMPDIR) cannot be used (No such file or "
            "directory): create it or set offload.dir to a directory on node-local storage");
  ::unsetenv("SLURM_TMPDIR");
  ::unsetenv("TMPDIR");
  EXPECT_EQ(*default_offload_dir(), "/tmp");

  if (saved_slurm) ::setenv("SLURM_TMPDIR", slurm.c_str(), 1);
  if (saved_tmp) ::setenv("TMPDIR", tmp.c_str(), 1);
}

TEST(FileTier, StagingBufferIsAccountedInTheRanksLedger) {
  const std::size_t before =
      MemoryLedger::process().snapshot().current_of(MemoryCategory::offload_staging);
  {
    auto tier = FileTier::create("", 100000);  // rounded up to whole pages
    ASSERT_TRUE(tier.ok()) << tier.status().message();
    EXPECT_EQ(MemoryLedger::process().snapshot().current_of(MemoryCategory::offload_staging),
              before + 102400);
  }
  EXPECT_EQ(MemoryLedger::process().snapshot().current_of(MemoryCategory::offload_staging), before);
}

}  // namespace
}  // namespace spw::offload
