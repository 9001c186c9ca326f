// One training run at a time in an output.dir (runtime/output_lock.hpp). flock locks belong to
// an open file, so two acquisitions in one process conflict as two processes' would.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <utility>

#include "runtime/output_lock.hpp"
#include "tests/temp_dir.hpp"

namespace spw {
namespace {

TEST(OutputDirLock, ASecondHolderIsRefusedNamingTheFirst) {
  TempDir dir("lock");
  Result<OutputDirLock> first = OutputDirLock::acquire(dir.path().string());
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_TRUE(first->held());
  const Result<OutputDirLock> second = OutputDirLock::acquire(dir.path().string());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::invalid_argument);
  const std::string wanted = "output.dir " + dir.path().string() +
                             " is in use by another spillway train (pid " +
                             std::to_string(::getpid()) + " on ";
  EXPECT_EQ(second.status().message().rfind(wanted, 0), 0u) << second.status().message();
  EXPECT_NE(
      second.status().message().find("): wait for it to end, or give this run another output.dir"),
      std::string::npos)
      << second.status().message();
}

TEST(OutputDirLock, ReleasedWhenItsHolderGoesEvenMoved) {
  TempDir dir("lock");
  {
    Result<OutputDirLock> first = OutputDirLock::acquire(dir.path().string());
    ASSERT_TRUE(first.ok()) << first.status().message();
    OutputDirLock moved = std::move(*first);
    EXPECT_TRUE(moved.held());
    EXPECT_FALSE(first->held());
    EXPECT_FALSE(OutputDirLock::acquire(dir.path().string()).ok());
  }
  const Result<OutputDirLock> again = OutputDirLock::acquire(dir.path().string());
  EXPECT_TRUE(again.ok()) << again.status().message();
}

TEST(OutputDirLock, ADirectoryThatIsNotThereIsAnIoError) {
  const Result<OutputDirLock> lock = OutputDirLock::acquire("/nonexistent/spillway-run");
  ASSERT_FALSE(lock.ok());
  EXPECT_EQ(lock.status().code(), StatusCode::io_error);
  EXPECT_EQ(lock.status().message().rfind("cannot open /nonexistent/spillway-run/.spillway-lock: "
                                          "No such file or directory",
                                          0),
            0u)
      << lock.status().message();
}

}  // namespace
}  // namespace spw
