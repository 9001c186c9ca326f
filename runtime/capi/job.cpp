// spw_job_*: building a job description by file, text and calls. Local; no MPI.
#include <memory>
#include <string>

#include "spillway/spillway.h"
#include "runtime/capi/abi_status.hpp"
#include "runtime/capi/handle_registry.hpp"
#include "runtime/capi/handles.hpp"

namespace spw::capi {
namespace {

spw_status reported(const char* fn, const AbiError& result) {
  return result.code == SPW_OK ? SPW_OK : fail(fn, result.code, result.message);
}

spw_status create_job(const char* fn, Result<JobDraft> draft, spw_job* out) {
  if (!draft.ok()) return fail(fn, draft.status());
  auto job = std::make_unique<spw_job_s>(spw_job_s{std::move(draft).value()});
  register_handle(job.get(), HandleKind::job);
  *out = job.release();
  return SPW_OK;
}

}  // namespace
}  // namespace spw::capi

using namespace spw::capi;

extern "C" {

SPW_API spw_status spw_job_create(spw_job* job) {
  const char* const fn = __func__;
  return guarded(fn, [&] {
    if (job == nullptr)
      return fail(fn, SPW_ERR_NULL_HANDLE, "job is NULL: pass the address of an spw_job");
    return create_job(fn, JobDraft::from_text("", "job"), job);
  });
}

SPW_API spw_status spw_job_create_from_file(const char* path, spw_job* job) {
  const char* const fn = __func__;
  return guarded(fn, [&] {
    if (path == nullptr)
      return fail(fn, SPW_ERR_NULL_HANDLE, "path is NULL: pass the job file's path");
    if (job == nullptr)
      return fail(fn, SPW_ERR_NULL_HANDLE, "job is NULL: pass the address of an spw_job");
    auto text = spw::read_job_file(path);
    if (!text.ok()) return fail(fn, text.status());
    return create_job(fn, JobDraft::from_text(std::move(text).value(), path), job);
  });
}

SPW_API spw_status spw_job_create_from_string(const char* toml, spw_job* job) {
  const char* const fn = __func__;
  return guarded(fn, [&] {
    if (toml == nullptr)
      return fail(fn, SPW_ERR_NULL_HANDLE,
                  "toml is NULL: pass the job's TOML text (\"\" for defaults)");
    if (job == nullptr)
      return fail(fn, SPW_ERR_NULL_HANDLE, "job is NULL: pass the address of an spw_job");
    return create_job(fn, JobDraft::from_text(toml, "job string"), job);
  });
}

SPW_API spw_status spw_job_set(spw_job job, const char* key, const char* value) {
  const char* const fn = __func__;
  return guarded(fn, [&] {
    if (const spw_status s = check_handle(fn, job, HandleKind::job, "job")) return s;
    if (key == nullptr)
      return fail(fn, SPW_ERR_NULL_HANDLE, "key is NULL: pass \"section.key\", e.g. \"train.lr\"");
    if (value == nullptr)
      return fail(fn, SPW_ERR_NULL_HANDLE,
                  "value is NULL: pass the value as TOML text, e.g. \"0.01\"");
    return reported(fn, job->draft.set(key, value));
  });
}

SPW_API spw_status spw_job_set_input(spw_job job, int width) {
  const char* const fn = __func__;
  return guarded(fn, [&] {
    if (const spw_status s = check_handle(fn, job, HandleKind::job, "job")) return s;
    return reported(fn, job->draft.set_input(width));
  });
}

SPW_API spw_status spw_job_add_dense(spw_job job, int width) {
  const char* const fn = __func__;
  return guarded(fn, [&] {
    if (const spw_status s = check_handle(fn, job, HandleKind::job, "job")) return s;
    return reported(fn, job->draft.add_dense(width));
  });
}

SPW_API spw_status spw_job_add_transformer_blocks(spw_job job, int count) {
  const char* const fn = __func__;
  return guarded(fn, [&] {
    if (const spw_status s = check_handle(fn, job, HandleKind::job, "job")) return s;
    return reported(fn, job->draft.add_transformer_blocks(count));
  });
}

SPW_API spw_status spw_job_check(spw_job job) {
  const char* const fn = __func__;
  return guarded(fn, [&] {
    if (const spw_status s = check_handle(fn, job, HandleKind::job, "job")) return s;
    spw::JobConfig config;
    return reported(fn, job->draft.resolve(config));
  });
}

SPW_API spw_status spw_job_free(spw_job job) {
  const char* const fn = __func__;
  return guarded(fn, [&] {
    if (job == nullptr) return SPW_OK;
    if (const spw_status s = check_handle(fn, job, HandleKind::job, "job")) return s;
    unregister_handle(job);
    delete job;
    return SPW_OK;
  });
}

}  // extern "C"
