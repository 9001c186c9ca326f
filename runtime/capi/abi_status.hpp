// How the C ABI reports: spw::Status to spw_status, the thread's last-error message, and
// the guard every exported function runs its body in, so that no exception crosses into C.
#pragma once

#include <new>
#include <string>
#include <utility>

#include "spillway/spillway.h"
#include "kernels/status.hpp"

namespace spw::capi {

// A failure of the ABI itself (a NULL or freed handle, a call out of order), or one of the
// runtime's Status codes.
struct AbiError {
  spw_status code = SPW_OK;
  std::string message;
};

spw_status to_abi(StatusCode code);

// Records `message` as this thread's last error, prefixed with the function's name.
spw_status fail(const char* function, spw_status code, const std::string& message);
spw_status fail(const char* function, const Status& status);
void clear_last_error();
const char* last_error_text();

// Runs `body` (returning spw_status) with the last error cleared first; an exception that
// escapes it becomes SPW_ERR_OUT_OF_MEMORY or SPW_ERR_INTERNAL with its text.
template <class Body>
spw_status guarded(const char* function, Body&& body) noexcept {
  try {
    clear_last_error();
    return std::forward<Body>(body)();
  } catch (const std::bad_alloc&) {
    return fail(function, SPW_ERR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return fail(function, SPW_ERR_INTERNAL, std::string("unexpected exception: ") + e.what());
  } catch (...) {
    return fail(function, SPW_ERR_INTERNAL, "unexpected exception");
  }
}

}  // namespace spw::capi
