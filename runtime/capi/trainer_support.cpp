#include "runtime/capi/trainer_support.hpp"

#include "runtime/capi/handle_registry.hpp"
#include "runtime/mpi_support.hpp"

namespace spw::capi {

spw_status check_usable(const char* function, spw_trainer trainer) {
  if (const spw_status s = check_handle(function, trainer, HandleKind::trainer, "trainer")) {
    return s;
  }
  if (!trainer->failure.empty()) {
    return fail(function, SPW_ERR_BAD_STATE,
                "an earlier call failed on this trainer (" + trainer->failure +
                    "): free it with spw_trainer_free; its peers may need MPI_Abort");
  }
  return SPW_OK;
}

AbiError agree(MPI_Comm comm, const AbiError& local) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  struct {
    int ok;
    int rank;
  } mine{local.code == SPW_OK ? 1 : 0, rank}, lowest{1, 0};
  const Status reduced = mpi_check(
      MPI_Allreduce(&mine, &lowest, 1, MPI_2INT, MPI_MINLOC, comm), "agreeing on the outcome");
  if (!reduced.ok()) return {SPW_ERR_COMMUNICATION, reduced.message()};
  if (lowest.ok == 1) return {};
  int code = local.code;
  const Status sent = mpi_check(MPI_Bcast(&code, 1, MPI_INT, lowest.rank, comm),
                                "agreeing on the outcome");
  if (!sent.ok()) return {SPW_ERR_COMMUNICATION, sent.message()};
  const Status message = agree_on_status(
      comm, local.code == SPW_OK ? Status::success()
                                 : error(StatusCode::internal, local.message));
  return {static_cast<spw_status>(code), message.message()};
}

spw_status fail_collective(const char* function, spw_trainer trainer, const Status& status) {
  trainer->failure = status.message();
  return fail(function, status);
}

}  // namespace spw::capi
