#include "runtime/capi/handle_registry.hpp"

#include <mutex>
#include <string>
#include <unordered_map>

#include "runtime/capi/abi_status.hpp"

namespace spw::capi {
namespace {

std::mutex registry_mutex;

// Never destroyed: a handle freed from an atexit handler or a static destructor must still
// find the registry.
std::unordered_map<const void*, HandleKind>& registry() {
  static auto* handles = new std::unordered_map<const void*, HandleKind>();
  return *handles;
}

const char* type_name(HandleKind kind) {
  switch (kind) {
    case HandleKind::session: return "spw_session";
    case HandleKind::job: return "spw_job";
    case HandleKind::trainer: return "spw_trainer";
  }
  return "handle";
}

const char* creator(HandleKind kind) {
  switch (kind) {
    case HandleKind::session: return "spw_session_create";
    case HandleKind::job: return "spw_job_create";
    case HandleKind::trainer: return "spw_trainer_create";
  }
  return "its create function";
}

}  // namespace

void register_handle(const void* handle, HandleKind kind) {
  const std::lock_guard<std::mutex> lock(registry_mutex);
  registry()[handle] = kind;
}

void unregister_handle(const void* handle) {
  const std::lock_guard<std::mutex> lock(registry_mutex);
  registry().erase(handle);
}

AbiError handle_error(const void* handle, HandleKind kind, const char* name) {
  if (handle == nullptr) {
    return {SPW_ERR_NULL_HANDLE, std::string(name) + " is NULL: create it with " + creator(kind)};
  }
  const std::lock_guard<std::mutex> lock(registry_mutex);
  const auto found = registry().find(handle);
  if (found == registry().end()) {
    return {SPW_ERR_BAD_STATE, std::string(name) + " is not a live " + type_name(kind) +
                                   " (freed already, or never created)"};
  }
  if (found->second != kind) {
    return {SPW_ERR_BAD_STATE, std::string(name) + " is an " + type_name(found->second) +
                                   ", not an " + type_name(kind)};
  }
  return {};
}

spw_status check_handle(const char* function, const void* handle, HandleKind kind,
                        const char* name) {
  const AbiError problem = handle_error(handle, kind, name);
  return problem.code == SPW_OK ? SPW_OK : fail(function, problem.code, problem.message);
}

}  // namespace spw::capi
