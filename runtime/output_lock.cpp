#include "runtime/output_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <utility>

namespace spw {
namespace {

// "pid 1234 on node07, since 2026-11-30 22:20:01": what a refused run is told.
std::string holder_description() {
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  ::localtime_r(&now, &local);
  char since[32] = "";
  std::strftime(since, sizeof since, "%Y-%m-%d %H:%M:%S", &local);
  return "pid " + std::to_string(::getpid()) + " on " + host + ", since " + since;
}

std::string read_all(int fd) {
  std::string text(256, '\0');
  const ssize_t n = ::pread(fd, text.data(), text.size(), 0);
  text.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
  return text.empty() ? "a process that has not said which yet" : text;
}

}  // namespace

Result<OutputDirLock> OutputDirLock::acquire(const std::string& dir) {
  const std::string path = dir + "/.spillway-lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return error(StatusCode::io_error, "cannot open " + path + ": " + std::strerror(errno) +
                                           " (set output.dir to a writable place)");
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    // Only another holder refuses the run. A file system without flock (Lustre mounted
    // without -o flock answers ENOSYS, NFS without a lock manager ENOLCK) leaves it
    // unguarded: the lock is a convenience, never a reason for a job not to run.
    if (errno != EWOULDBLOCK) {
      ::close(fd);
      return OutputDirLock();
    }
    const std::string message = "output.dir " + dir + " is in use by another spillway train (" +
                                read_all(fd) +
                                "): wait for it to end, or give this run another output.dir";
    ::close(fd);
    return error(StatusCode::invalid_argument, message);
  }
  // Who holds it, for the message of a run refused later; the lock stands without it.
  const std::string holder = holder_description() + "\n";
  if (::ftruncate(fd, 0) == 0) {
    (void)!::pwrite(fd, holder.data(), holder.size(), 0);
  }
  return OutputDirLock(fd);
}

OutputDirLock::OutputDirLock(OutputDirLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

OutputDirLock& OutputDirLock::operator=(OutputDirLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

// Closing the descriptor releases the lock; the file stays, so no other run can lock a
// file this one's removal would orphan.
OutputDirLock::~OutputDirLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace spw
