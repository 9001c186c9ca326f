#include "kernels/atomic_file.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace spw {

Status write_file_atomically(const std::string& path, const std::string& contents) {
  const std::string temporary = path + ".tmp." + std::to_string(getpid());
  std::FILE* file = std::fopen(temporary.c_str(), "wb");
  if (file == nullptr) {
    return error(StatusCode::io_error,
                 "cannot write " + path + ": " + std::strerror(errno));
  }
  const bool written = std::fwrite(contents.data(), 1, contents.size(), file) == contents.size();
  const bool flushed = std::fflush(file) == 0 && fsync(fileno(file)) == 0;
  const int err = errno;
  const bool closed = std::fclose(file) == 0;
  if (!written || !flushed || !closed) {
    std::remove(temporary.c_str());
    return error(StatusCode::io_error, "cannot write " + path + ": " + std::strerror(err));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int rename_err = errno;
    std::remove(temporary.c_str());
    return error(StatusCode::io_error,
                 "cannot move " + temporary + " to " + path + ": " + std::strerror(rename_err));
  }
  return Status::success();
}

}  // namespace spw
