#include "runtime/json_file.hpp"

#include <filesystem>

namespace spw {

Status write_json_atomically(const std::string& path, const nlohmann::json& value) {
  return write_file_atomically(path, value.dump(2) + "\n");
}

Status ensure_directory(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return error(StatusCode::io_error,
                 "cannot create output directory " + dir + ": " + ec.message() +
                     " (set output.dir to a writable place)");
  }
  return Status::success();
}

}  // namespace spw
