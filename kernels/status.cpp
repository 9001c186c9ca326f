#include "status.hpp"

namespace spw {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::ok: return "ok";
    case StatusCode::invalid_argument: return "invalid argument";
    case StatusCode::shape_mismatch: return "shape mismatch";
    case StatusCode::out_of_memory: return "out of memory";
    case StatusCode::memory_cap: return "memory cap exceeded";
    case StatusCode::io_error: return "I/O error";
    case StatusCode::not_found: return "not found";
    case StatusCode::unsupported: return "unsupported";
    case StatusCode::config_error: return "configuration error";
    case StatusCode::communication: return "communication error";
    case StatusCode::internal: return "internal error";
  }
  return "unknown status";
}

Status Status::with_context(const std::string& context) const {
  if (ok()) return *this;
  return {code_, context + ": " + message_};
}

}  // namespace spw
