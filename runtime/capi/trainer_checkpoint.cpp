// spw_trainer_save_checkpoint / spw_trainer_load_checkpoint: pipeline checkpoints
// (runtime/pipeline_checkpoint.hpp), one file in the single-rank layout.
#include <string>

#include "runtime/capi/abi_status.hpp"
#include "runtime/capi/handles.hpp"
#include "runtime/capi/trainer_support.hpp"
#include "runtime/checkpoint_model.hpp"
#include "runtime/mpi_support.hpp"
#include "runtime/pipeline_checkpoint.hpp"
#include "spillway/spillway.h"

namespace spw::capi {
namespace {

spw_status save(const char* fn, spw_trainer trainer, const char* path) {
  if (const spw_status s = check_usable(fn, trainer)) return s;
  if (path == nullptr) return fail(fn, SPW_ERR_NULL_HANDLE, "path is NULL: pass the file to write");
  const Status saved = save_pipeline_checkpoint(*trainer->pipeline.executor,
                                                trainer->pipeline.world, path,
                                                to_json(trainer->job).dump());
  // Save errors are agreed and leave no file, so the ranks are still in step: unless MPI
  // itself failed, the trainer carries on.
  if (!saved.ok() && saved.code() == StatusCode::communication) {
    return fail_collective(fn, trainer, saved);
  }
  return fail(fn, saved);
}

spw_status load(const char* fn, spw_trainer trainer, const char* path) {
  if (const spw_status s = check_usable(fn, trainer)) return s;
  if (path == nullptr) return fail(fn, SPW_ERR_NULL_HANDLE, "path is NULL: pass the file to read");
  // Every rank reads the same file; they agree all the same, as one may fail to read it.
  const Status same_model = agree_on_status(trainer->pipeline.world,
                                            read_checkpoint_meta_for(path, trainer->job).status());
  if (!same_model.ok()) {
    return same_model.code() == StatusCode::communication ? fail_collective(fn, trainer, same_model)
                                                          : fail(fn, same_model);
  }
  const Status loaded =
      load_pipeline_checkpoint(*trainer->pipeline.executor, trainer->pipeline.world, path);
  if (loaded.ok()) return SPW_OK;
  // These are found while checking the file, before any rank changes anything; an I/O or
  // MPI error may come half-way through the tensors.
  const StatusCode code = loaded.code();
  const bool unchanged = code == StatusCode::not_found || code == StatusCode::shape_mismatch ||
                         code == StatusCode::invalid_argument;
  return unchanged ? fail(fn, loaded) : fail_collective(fn, trainer, loaded);
}

}  // namespace
}  // namespace spw::capi

using namespace spw::capi;

extern "C" {

SPW_API spw_status spw_trainer_save_checkpoint(spw_trainer trainer, const char* path) {
  const char* const fn = __func__;
  return guarded(fn, [&] { return save(fn, trainer, path); });
}

SPW_API spw_status spw_trainer_load_checkpoint(spw_trainer trainer, const char* path) {
  const char* const fn = __func__;
  return guarded(fn, [&] { return load(fn, trainer, path); });
}

}  // extern "C"
