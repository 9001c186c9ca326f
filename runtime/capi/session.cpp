// spw_session_*: the caller's communicator, duplicated so spillway's traffic stays apart.
#include <string>

#include "spillway/spillway.h"
#include "runtime/capi/abi_status.hpp"
#include "runtime/capi/handle_registry.hpp"
#include "runtime/capi/handles.hpp"
#include "runtime/mpi_support.hpp"

// The Fortran interface passes communicators as default integers (c_int).
static_assert(sizeof(MPI_Fint) == sizeof(int), "MPI_Fint must be a C int for spillway.f90");

namespace spw::capi {
namespace {

spw_status create_session(const char* fn, MPI_Comm comm, spw_session* out) {
  if (out == nullptr) {
    return fail(fn, SPW_ERR_NULL_HANDLE, "session is NULL: pass the address of an spw_session");
  }
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) {
    return fail(fn, SPW_ERR_BAD_STATE,
                std::string("MPI is ") + (finalized ? "already finalized" : "not initialized") +
                    ": call MPI_Init_thread (MPI_THREAD_MULTIPLE recommended) before "
                    "creating a session and MPI_Finalize after freeing it; spillway never "
                    "does either");
  }
  if (comm == MPI_COMM_NULL) {
    return fail(fn, SPW_ERR_INVALID_ARGUMENT,
                "comm is MPI_COMM_NULL: pass the communicator of the ranks that train, e.g. "
                "MPI_COMM_WORLD");
  }
  int inter = 0;
  MPI_Comm_test_inter(comm, &inter);
  if (inter) {
    return fail(fn, SPW_ERR_INVALID_ARGUMENT,
                "comm is an inter-communicator: pass an intra-communicator (e.g. from "
                "MPI_Intercomm_merge)");
  }
  auto session = std::make_unique<spw_session_s>();
  const Status dup = mpi_check(MPI_Comm_dup(comm, &session->comm), "duplicating comm");
  if (!dup.ok()) return fail(fn, dup);
  MPI_Comm_set_errhandler(session->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(session->comm, &session->rank);
  MPI_Comm_size(session->comm, &session->size);
  // A model too big for the node then fails with SPW_ERR_OUT_OF_MEMORY and a message
  // instead of the host being ended by the kernel's OOM killer.
  auto budget = NodeMemoryBudgetScope::install(session->comm);
  if (!budget.ok()) {
    MPI_Comm_free(&session->comm);
    return fail(fn, budget.status());
  }
  session->node_budget = std::move(*budget);
  register_handle(session.get(), HandleKind::session);
  *out = session.release();
  return SPW_OK;
}

}  // namespace
}  // namespace spw::capi

using namespace spw::capi;

extern "C" {

SPW_API spw_status spw_session_create(MPI_Comm comm, spw_session* session) {
  const char* const fn = __func__;
  return guarded(fn, [&] { return create_session(fn, comm, session); });
}

SPW_API spw_status spw_session_create_f(MPI_Fint comm, spw_session* session) {
  const char* const fn = __func__;
  return guarded(fn, [&] {
    // MPI_Comm_f2c is only defined once MPI is initialised; create_session says so first.
    int initialized = 0;
    int finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (!initialized || finalized) return create_session(fn, MPI_COMM_NULL, session);
    const MPI_Comm c = MPI_Comm_f2c(comm);
    // Open MPI returns a null pointer rather than MPI_COMM_NULL for an index it never gave
    // out; MPI_Comm{} is that null in either representation of MPI_Comm (pointer or int).
    if ((c == MPI_COMM_NULL || c == MPI_Comm{}) && session != nullptr) {
      return fail(fn, SPW_ERR_INVALID_ARGUMENT,
                  "comm " + std::to_string(comm) + " is not a Fortran communicator handle "
                  "(or it is MPI_COMM_NULL): pass e.g. MPI_COMM_WORLD");
    }
    return create_session(fn, c, session);
  });
}

SPW_API spw_status spw_session_rank(spw_session session, int* rank) {
  const char* const fn = __func__;
  return guarded(fn, [&] {
    if (const spw_status s = check_handle(fn, session, HandleKind::session, "session")) return s;
    if (rank == nullptr)
      return fail(fn, SPW_ERR_NULL_HANDLE, "rank is NULL: pass an int's address");
    *rank = session->rank;
    return SPW_OK;
  });
}

SPW_API spw_status spw_session_size(spw_session session, int* size) {
  const char* const fn = __func__;
  return guarded(fn, [&] {
    if (const spw_status s = check_handle(fn, session, HandleKind::session, "session")) return s;
    if (size == nullptr)
      return fail(fn, SPW_ERR_NULL_HANDLE, "size is NULL: pass an int's address");
    *size = session->size;
    return SPW_OK;
  });
}

SPW_API spw_status spw_session_free(spw_session session) {
  const char* const fn = __func__;
  return guarded(fn, [&] {
    if (session == nullptr) return SPW_OK;
    if (const spw_status s = check_handle(fn, session, HandleKind::session, "session")) return s;
    if (session->live_trainers > 0) {
      return fail(fn, SPW_ERR_BAD_STATE,
                  std::to_string(session->live_trainers) +
                      " trainer(s) still run on this session: free them with "
                      "spw_trainer_free first");
    }
    unregister_handle(session);
    std::unique_ptr<spw_session_s> owned(session);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) {
      return fail(fn, SPW_ERR_BAD_STATE,
                  "MPI was finalized before the session was freed, so its communicator "
                  "could not be freed: free sessions before MPI_Finalize (the handle is "
                  "released regardless)");
    }
    owned->node_budget.reset();  // collective over the node's ranks, before the communicator
    const spw::Status freed =
        spw::mpi_check(MPI_Comm_free(&owned->comm), "freeing the session's communicator");
    return freed.ok() ? SPW_OK : fail(fn, freed);
  });
}

}  // extern "C"
