// spw_trainer_*: a job running as a pipeline on a session's ranks. Opening it goes through
// open_pipeline_job, the same path as `spillway train`, so both arrive at the same layout.
#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <string>

#include "spillway/spillway.h"
#include "kernels/memory_ledger.hpp"
#include "runtime/capi/abi_status.hpp"
#include "runtime/capi/handle_registry.hpp"
#include "runtime/capi/handles.hpp"
#include "runtime/capi/trainer_support.hpp"
#include "runtime/mpi_support.hpp"
#include "runtime/report.hpp"
#include "runtime/stop_request.hpp"
#include "runtime/train_command.hpp"

namespace spw::capi {
namespace {

// Everything spw_trainer_create checks on this rank alone, before any rank goes further.
AbiError check_job_locally(spw_job job, spw_trainer* out, JobConfig& config) {
  AbiError handle = handle_error(job, HandleKind::job, "job");
  if (handle.code != SPW_OK) return handle;
  if (out == nullptr) {
    return {SPW_ERR_NULL_HANDLE, "trainer is NULL: pass the address of an spw_trainer"};
  }
  AbiError resolved = job->draft.resolve(config);
  if (resolved.code != SPW_OK) return resolved;
  if (config.output.keep_best) {
    return {SPW_ERR_UNSUPPORTED,
            "output.keep_best is not used through the C ABI: set it to false, and save a "
            "checkpoint when spw_trainer_evaluate gives a lower loss"};
  }
  if (config.output.checkpoint_every > 0) {
    return {SPW_ERR_UNSUPPORTED,
            "output.checkpoint_every is not used through the C ABI: set it to 0 and call "
            "spw_trainer_save_checkpoint when you want a checkpoint"};
  }
  return {};
}

spw_status create_trainer(const char* fn, spw_session session, spw_job job, spw_trainer* out) {
  // Without a live session there is no communicator to agree on: report at once.
  if (const spw_status s = check_handle(fn, session, HandleKind::session, "session")) return s;
  auto trainer = std::make_unique<spw_trainer_s>();
  const AbiError checked =
      agree(session->comm, check_job_locally(job, out, trainer->job));
  if (checked.code != SPW_OK) return fail(fn, checked.code, checked.message);

  PipelineJobOptions options;
  options.trace = false;
  options.create_output_dir = false;
  auto opened = open_pipeline_job(trainer->job, session->comm, options);
  if (!opened.ok()) return fail(fn, opened.status());
  trainer->pipeline = std::move(opened).value();
  trainer->session = session;
  const TrainSettings& train = trainer->pipeline.settings.train;
  trainer->items_per_step =
      static_cast<double>(train.batch * train.model.positions_per_sample());
  ++session->live_trainers;
  register_handle(trainer.get(), HandleKind::trainer);
  *out = trainer.release();
  return SPW_OK;
}

std::string plan_text(const spw_trainer_s& trainer) {
  std::string text = trainer.pipeline.settings.layout.describe();
  if (trainer.pipeline.planned) text += "\n" + trainer.pipeline.plan_explanation;
  return text;
}

// Ranks that disagree on a count would hang in the pass where one stops: compare first.
// SPW_OK when every rank passed the same count of at least 1. `what` names the counted
// thing ("step"), `parameter` the argument ("steps").
spw_status check_same_count(const char* fn, spw_trainer trainer, std::int64_t count,
                            const std::string& what, const std::string& parameter) {
  const long long clamped = std::max<long long>(count, -std::numeric_limits<long long>::max());
  long long range[2] = {-clamped, clamped};
  long long extremes[2] = {0, 0};
  const Status compared =
      mpi_check(MPI_Allreduce(range, extremes, 2, MPI_LONG_LONG, MPI_MAX, trainer->pipeline.world),
                "comparing the ranks' counts");
  if (!compared.ok()) return fail_collective(fn, trainer, compared);
  const long long lowest = -extremes[0];
  const long long highest = extremes[1];
  if (lowest != highest) {
    return fail(fn, SPW_ERR_INVALID_ARGUMENT,
                "the ranks asked for different " + what + " counts (from " +
                    std::to_string(lowest) + " to " + std::to_string(highest) +
                    "): pass the same count on every rank");
  }
  if (count < 1) {
    return fail(fn, SPW_ERR_INVALID_ARGUMENT,
                parameter + " must be at least 1, got " + std::to_string(count));
  }
  return SPW_OK;
}

spw_status evaluate(const char* fn, spw_trainer trainer, int batches, double* loss) {
  if (const spw_status s = check_usable(fn, trainer)) return s;
  if (loss == nullptr) {
    return fail(fn, SPW_ERR_NULL_HANDLE, "loss is NULL: pass a double's address");
  }
  if (const spw_status s = check_same_count(fn, trainer, batches, "batch", "batches")) return s;
  PipelineExecutor& executor = *trainer->pipeline.executor;
  // Agreed, and the trainer stays usable when the job's data has no held-out part; only
  // MPI failing while the ranks agree leaves it unusable.
  if (const Status opened = executor.open_evaluation_data(); !opened.ok()) {
    if (opened.code() == StatusCode::communication) return fail_collective(fn, trainer, opened);
    return fail(fn, opened);
  }
  const Result<double> evaluated = executor.evaluate(batches);
  if (!evaluated.ok()) return fail_collective(fn, trainer, evaluated.status());
  *loss = *evaluated;
  return SPW_OK;
}

spw_status train(const char* fn, spw_trainer trainer, std::int64_t steps) {
  if (const spw_status s = check_usable(fn, trainer)) return s;
  const MPI_Comm world = trainer->pipeline.world;
  if (const spw_status s = check_same_count(fn, trainer, steps, "step", "steps")) return s;
  trainer->stop_signal = 0;
  for (std::int64_t i = 0; i < steps; ++i) {
    StepResult step;
    const Status ran = trainer->pipeline.executor->run_step(step);
    if (!ran.ok()) return fail_collective(fn, trainer, ran);
    trainer->losses.push_back(step.loss);
    trainer->step_seconds.push_back(step.seconds);
    const Result<int> stop = agree_on_stop(world);
    if (!stop.ok()) return fail_collective(fn, trainer, stop.status());
    if (*stop != 0) {
      clear_stop_request();
      trainer->stop_signal = *stop;
      break;
    }
  }
  return SPW_OK;
}

spw_status describe_plan(const char* fn, spw_trainer trainer, char* buffer, std::size_t size,
                         std::size_t* needed) {
  if (const spw_status s = check_usable(fn, trainer)) return s;
  if (buffer == nullptr && size > 0) {
    return fail(fn, SPW_ERR_INVALID_ARGUMENT,
                "buffer is NULL but size is " + std::to_string(size) +
                    ": pass a buffer of that size, or NULL and 0 to ask for the size");
  }
  if (buffer == nullptr && needed == nullptr) {
    return fail(fn, SPW_ERR_NULL_HANDLE,
                "buffer and needed are both NULL: pass needed to learn the size");
  }
  const std::string text = plan_text(*trainer);
  const std::size_t bytes = text.size() + 1;
  if (needed != nullptr) *needed = bytes;
  if (buffer == nullptr) return SPW_OK;
  if (size < bytes) {
    if (size > 0) buffer[0] = '\0';
    return fail(fn, SPW_ERR_INVALID_ARGUMENT,
                "a buffer of " + std::to_string(size) + " bytes is too small for the plan: it "
                "needs " + std::to_string(bytes) + " (the terminating NUL included)");
  }
  std::memcpy(buffer, text.c_str(), bytes);
  return SPW_OK;
}

}  // namespace
}  // namespace spw::capi

using namespace spw::capi;

extern "C" {

SPW_API spw_status spw_trainer_create(spw_session session, spw_job job, spw_trainer* trainer) {
  const char* const fn = __func__;
  return guarded(fn, [&] { return create_trainer(fn, session, job, trainer); });
}

SPW_API spw_status spw_trainer_describe_plan(spw_trainer trainer, char* buffer, size_t size,
                                             size_t* needed) {
  const char* const fn = __func__;
  return guarded(fn, [&] { return describe_plan(fn, trainer, buffer, size, needed); });
}

SPW_API spw_status spw_trainer_train(spw_trainer trainer, int64_t steps) {
  const char* const fn = __func__;
  return guarded(fn, [&] { return train(fn, trainer, steps); });
}

SPW_API spw_status spw_trainer_evaluate(spw_trainer trainer, int batches, double* loss) {
  const char* const fn = __func__;
  return guarded(fn, [&] { return evaluate(fn, trainer, batches, loss); });
}

SPW_API spw_status spw_trainer_steps_done(spw_trainer trainer, int64_t* steps) {
  const char* const fn = __func__;
  return guarded(fn, [&] {
    if (const spw_status s = check_usable(fn, trainer)) return s;
    if (steps == nullptr)
      return fail(fn, SPW_ERR_NULL_HANDLE, "steps is NULL: pass an int64_t's address");
    *steps = trainer->pipeline.executor->steps_done();
    return SPW_OK;
  });
}

SPW_API spw_status spw_trainer_loss(spw_trainer trainer, double* loss) {
  const char* const fn = __func__;
  return guarded(fn, [&] {
    if (const spw_status s = check_usable(fn, trainer)) return s;
    if (loss == nullptr)
      return fail(fn, SPW_ERR_NULL_HANDLE, "loss is NULL: pass a double's address");
    if (trainer->losses.empty()) {
      return fail(fn, SPW_ERR_BAD_STATE, "no step has run yet: call spw_trainer_train first");
    }
    *loss = trainer->losses.back();
    return SPW_OK;
  });
}

SPW_API spw_status spw_trainer_throughput(spw_trainer trainer, double* per_second) {
  const char* const fn = __func__;
  return guarded(fn, [&] {
    if (const spw_status s = check_usable(fn, trainer)) return s;
    if (per_second == nullptr)
      return fail(fn, SPW_ERR_NULL_HANDLE, "per_second is NULL: pass a double's address");
    if (trainer->step_seconds.empty()) {
      return fail(fn, SPW_ERR_BAD_STATE, "no step has run yet: call spw_trainer_train first");
    }
    *per_second = spw::median_items_per_second(trainer->step_seconds, trainer->items_per_step);
    return SPW_OK;
  });
}

SPW_API spw_status spw_trainer_peak_memory(spw_trainer trainer, uint64_t* bytes) {
  const char* const fn = __func__;
  return guarded(fn, [&] {
    if (const spw_status s = check_usable(fn, trainer)) return s;
    if (bytes == nullptr)
      return fail(fn, SPW_ERR_NULL_HANDLE, "bytes is NULL: pass a uint64_t's address");
    *bytes = static_cast<uint64_t>(spw::MemoryLedger::process().peak_total());
    return SPW_OK;
  });
}

SPW_API spw_status spw_trainer_free(spw_trainer trainer) {
  const char* const fn = __func__;
  return guarded(fn, [&] {
    if (trainer == nullptr) return SPW_OK;
    if (const spw_status s = check_handle(fn, trainer, HandleKind::trainer, "trainer")) return s;
    unregister_handle(trainer);
    --trainer->session->live_trainers;
    delete trainer;
    return SPW_OK;
  });
}

}  // extern "C"
