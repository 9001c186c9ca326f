// The file tier's failures are found early and named: a missing, misplaced or read-only
// directory at creation, a full disk when storing (with the stash left intact and the space
// given back). Its files have no name and their space is freed when the tier goes.
//
// The full-disk and read-only cases mount a small private tmpfs (tests run as root here);
// where mounting is not allowed they are skipped, saying why.
#include <gtest/gtest.h>
#include <sys/mount.h>
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
  ScratchMount(const char* size, bool read_only) {
    char pattern[] = "/tmp/spw-offload-mount-XXXXXX";
    if (::mkdtemp(pattern) == nullptr) {
      why_ = std::strerror(errno);
      return;
    }
    path_ = pattern;
    const std::string options = std::string("size=") + size;
    if (::mount("tmpfs", path_.c_str(), "tmpfs", read_only ? MS_RDONLY : 0, options.c_str()) != 0)
      why_ = std::string("cannot mount a tmpfs here (") + std::strerror(errno) + ")";
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

std::vector<Region> regions_of(std::vector<unsigned char>& bytes) { return {{bytes.data(), bytes.size()}}; }

TEST(FileTier, MissingDirectoryIsNamedAtCreation) {
  auto tier = make_file_tier("/nonexistent/spillway-offload");
  ASSERT_FALSE(tier.ok());
  EXPECT_EQ(tier.status().code(), StatusCode::not_found);
  EXPECT_EQ(tier.status().message(),
            "offload directory /nonexistent/spillway-offload cannot be used (No such file or "
            "directory): create it or set offload.dir to a directory on node-local storage");
}

TEST(FileTier, APathUnderARegularFileIsRefusedEvenForRoot) {
  const std::string file = fs::temp_directory_path() / ("spw-offload-file-" + std::to_string(::getpid()));
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
  EXPECT_EQ(status.message().rfind("evicting stash 1 to the file tier: writing stash 1 to a file in " +
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
