// Which handles are live. A handle is checked against this registry before it is touched,
// so a freed handle (or one of another type) is reported instead of dereferenced; only a
// new handle that reuses a freed one's address can hide the mistake.
#pragma once

#include "spillway/spillway.h"
#include "runtime/capi/abi_status.hpp"

namespace spw::capi {

enum class HandleKind { session, job, trainer };

void register_handle(const void* handle, HandleKind kind);
void unregister_handle(const void* handle);

// Code SPW_OK when `handle` is a live handle of `kind`, else why not ("job is NULL: ...",
// "job is not a live spw_job ..."); `name` is the parameter's name in the header.
AbiError handle_error(const void* handle, HandleKind kind, const char* name);

// The same, recorded as `function`'s failure.
spw_status check_handle(const char* function, const void* handle, HandleKind kind,
                        const char* name);

}  // namespace spw::capi
