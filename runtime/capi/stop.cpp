// spw_request_stop, spw_catch_stop_signals, spw_trainer_stop_signal: the ABI's side of
// runtime/stop_request.hpp. spw_trainer_train reads the request (trainer.cpp).
#include "runtime/capi/abi_status.hpp"
#include "runtime/capi/handles.hpp"
#include "runtime/capi/trainer_support.hpp"
#include "runtime/stop_request.hpp"
#include "spillway/spillway.h"

using namespace spw::capi;

extern "C" {

// No guard, no message: a signal handler may call this, so it only stores an int.
SPW_API void spw_request_stop(int signal_number) {
  if (signal_number > 0) spw::request_stop(signal_number);
}

SPW_API spw_status spw_catch_stop_signals(void) {
  const char* const fn = __func__;
  return guarded(fn, [&] { return fail(fn, spw::catch_stop_signals()); });
}

SPW_API spw_status spw_trainer_stop_signal(spw_trainer trainer, int* signal_number) {
  const char* const fn = __func__;
  return guarded(fn, [&] {
    if (const spw_status s = check_usable(fn, trainer)) return s;
    if (signal_number == nullptr) {
      return fail(fn, SPW_ERR_NULL_HANDLE, "signal_number is NULL: pass where to put it");
    }
    *signal_number = trainer->stop_signal;
    return SPW_OK;
  });
}

}  // extern "C"
