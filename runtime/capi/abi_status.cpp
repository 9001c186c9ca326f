#include "runtime/capi/abi_status.hpp"

#include <cstdio>

#include "runtime/version.hpp"

namespace spw::capi {
namespace {

// Per thread, so two threads driving two sessions never read each other's message.
thread_local std::string last_error;

}  // namespace

spw_status to_abi(StatusCode code) {
  switch (code) {
    case StatusCode::ok: return SPW_OK;
    case StatusCode::invalid_argument: return SPW_ERR_INVALID_ARGUMENT;
    case StatusCode::shape_mismatch: return SPW_ERR_SHAPE_MISMATCH;
    case StatusCode::out_of_memory: return SPW_ERR_OUT_OF_MEMORY;
    case StatusCode::memory_cap: return SPW_ERR_MEMORY_CAP;
    case StatusCode::io_error: return SPW_ERR_IO;
    case StatusCode::not_found: return SPW_ERR_NOT_FOUND;
    case StatusCode::unsupported: return SPW_ERR_UNSUPPORTED;
    case StatusCode::config_error: return SPW_ERR_CONFIG;
    case StatusCode::communication: return SPW_ERR_COMMUNICATION;
    case StatusCode::internal: return SPW_ERR_INTERNAL;
  }
  return SPW_ERR_INTERNAL;
}

spw_status fail(const char* function, spw_status code, const std::string& message) {
  last_error = std::string(function) + ": " + message;
  return code;
}

spw_status fail(const char* function, const Status& status) {
  if (status.ok()) return SPW_OK;
  return fail(function, to_abi(status.code()), status.message());
}

void clear_last_error() { last_error.clear(); }

const char* last_error_text() { return last_error.c_str(); }

}  // namespace spw::capi

extern "C" {

SPW_API const char* spw_status_string(spw_status status) {
  switch (status) {
    case SPW_OK: return "success";
    case SPW_ERR_INVALID_ARGUMENT: return "invalid argument";
    case SPW_ERR_SHAPE_MISMATCH: return "shape mismatch";
    case SPW_ERR_OUT_OF_MEMORY: return "out of memory";
    case SPW_ERR_MEMORY_CAP: return "memory cap exceeded";
    case SPW_ERR_IO: return "I/O error";
    case SPW_ERR_NOT_FOUND: return "not found";
    case SPW_ERR_UNSUPPORTED: return "unsupported";
    case SPW_ERR_CONFIG: return "configuration error";
    case SPW_ERR_COMMUNICATION: return "communication error";
    case SPW_ERR_INTERNAL: return "internal error";
    case SPW_ERR_NULL_HANDLE: return "NULL handle or pointer";
    case SPW_ERR_BAD_STATE: return "freed handle or call out of order";
  }
  return "unknown status";
}

SPW_API const char* spw_last_error(void) { return spw::capi::last_error_text(); }

SPW_API spw_status spw_get_version(int* major, int* minor, int* patch) {
  const char* const fn = __func__;
  return spw::capi::guarded(fn, [&] {
    if (major == nullptr || minor == nullptr || patch == nullptr) {
      return spw::capi::fail(fn, SPW_ERR_NULL_HANDLE,
                             "major, minor and patch must all point to ints");
    }
    int parts[3] = {0, 0, 0};
    if (std::sscanf(spw::version_string(), "%d.%d.%d", &parts[0], &parts[1], &parts[2]) != 3) {
      return spw::capi::fail(fn, SPW_ERR_INTERNAL,
                             std::string("malformed version ") + spw::version_string());
    }
    *major = parts[0];
    *minor = parts[1];
    *patch = parts[2];
    return SPW_OK;
  });
}

}
