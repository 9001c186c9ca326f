#include "runtime/hdf5_support.hpp"

namespace spw {
namespace {

herr_t keep_innermost(unsigned n, const H5E_error2_t* entry, void* reason) {
  if (n == 0 && entry->desc != nullptr) *static_cast<std::string*>(reason) = entry->desc;
  return 0;
}

}  // namespace

// Why HDF5 failed, from the innermost entry of its error stack (the API-level ones only say
// "unable to open file"), then clears the stack. Entries from system calls embed strerror as
// "error message = '...'" among file names and timestamps; that part is what a user needs.
std::string hdf5_reason() {
  std::string reason;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, keep_innermost, &reason);
  H5Eclear2(H5E_DEFAULT);
  const std::string marker = "error message = '";
  const std::size_t at = reason.find(marker);
  if (at != std::string::npos) {
    const std::size_t begin = at + marker.size();
    return reason.substr(begin, reason.find('\'', begin) - begin);
  }
  return reason.substr(0, reason.find('\n'));
}

Status hdf5_error(const std::string& what) {
  const std::string reason = hdf5_reason();
  return error(StatusCode::io_error, reason.empty() ? what : what + " (" + reason + ")");
}

}  // namespace spw
