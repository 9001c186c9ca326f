// HDF5 as the checkpoint code uses it: identifiers that close themselves, and HDF5's error
// stack turned into a Status instead of printed.
#pragma once

#include <hdf5.h>

#include <string>
#include <utility>

#include "kernels/status.hpp"

namespace spw {

// Owns one HDF5 identifier, so every early return closes what it opened.
class Hid {
 public:
  using Closer = herr_t (*)(hid_t);

  Hid() = default;
  Hid(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  Hid(Hid&& other) noexcept
      : id_(std::exchange(other.id_, H5I_INVALID_HID)), closer_(other.closer_) {}
  Hid& operator=(Hid&& other) noexcept {
    if (this != &other) {
      close();
      id_ = std::exchange(other.id_, H5I_INVALID_HID);
      closer_ = other.closer_;
    }
    return *this;
  }
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  ~Hid() { close(); }

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closing a file flushes it, which can fail: the writer calls this and checks.
  herr_t close() {
    const herr_t result = id_ >= 0 ? closer_(id_) : 0;
    id_ = H5I_INVALID_HID;
    return result;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

// HDF5 prints its error stack to stderr by default; spillway reports through Status instead.
// The caller's handler comes back afterwards, for programs that use HDF5 themselves.
class QuietHdf5 {
 public:
  QuietHdf5() {
    H5Eget_auto2(H5E_DEFAULT, &handler_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~QuietHdf5() { H5Eset_auto2(H5E_DEFAULT, handler_, data_); }
  QuietHdf5(const QuietHdf5&) = delete;
  QuietHdf5& operator=(const QuietHdf5&) = delete;

 private:
  H5E_auto2_t handler_ = nullptr;
  void* data_ = nullptr;
};

// Why HDF5 failed, from the innermost entry of its error stack, then clears the stack.
std::string hdf5_reason();

// io_error: `what`, and hdf5_reason() in parentheses when HDF5 gave one.
Status hdf5_error(const std::string& what);

}  // namespace spw
