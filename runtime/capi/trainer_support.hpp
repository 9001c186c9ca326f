// What the spw_trainer_* functions share: checking a trainer before a call and agreeing on
// one outcome across ranks.
#pragma once

#include <mpi.h>

#include "spillway/spillway.h"
#include "runtime/capi/abi_status.hpp"
#include "runtime/capi/handles.hpp"

namespace spw::capi {

// The handle is live and no earlier collective call failed on it.
spw_status check_usable(const char* function, spw_trainer trainer);

// Collective over `comm`: SPW_OK on every rank when `local` is SPW_OK on every rank, else
// every rank gets the code and message of the lowest failing rank (see agree_on_status).
AbiError agree(MPI_Comm comm, const AbiError& local);

// Marks the trainer unusable after a failed collective call and reports the failure.
spw_status fail_collective(const char* function, spw_trainer trainer, const Status& status);

}  // namespace spw::capi
