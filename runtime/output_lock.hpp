// One training run at a time in an output.dir. Two runs that share one (a job submitted
// twice, a second launch while the first still runs) overwrite each other's checkpoints,
// report and plan, and a resume may then take the other run's checkpoint. So a training run
// holds an flock on output.dir/.spillway-lock for its whole life. The kernel releases it
// when the process ends, however it ends, so a killed or requeued job leaves no stale lock.
// Evaluations and samples take none: scoring a running job's checkpoints is their use.
#pragma once

#include <string>

#include "kernels/status.hpp"

namespace spw {

class OutputDirLock {
 public:
  // Takes the lock of `dir` (which must exist) and records this process in it. Fails with
  // invalid_argument, naming the process that holds it, when another does, and io_error when
  // the lock file cannot be opened. Where the file system keeps no flock locks (any other
  // failure of flock), the run goes on unguarded: an empty lock (held() false).
  static Result<OutputDirLock> acquire(const std::string& dir);

  OutputDirLock() = default;
  OutputDirLock(OutputDirLock&& other) noexcept;
  OutputDirLock& operator=(OutputDirLock&& other) noexcept;
  OutputDirLock(const OutputDirLock&) = delete;
  OutputDirLock& operator=(const OutputDirLock&) = delete;
  ~OutputDirLock();

  bool held() const { return fd_ >= 0; }

 private:
  explicit OutputDirLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace spw
