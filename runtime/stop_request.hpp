// Stopping a run early on purpose, with a checkpoint to resume from. A batch job that is about
// to reach its time limit or to be preempted gets a signal first (Slurm: --signal=USR1@120,
// or SIGTERM KillWait seconds before SIGKILL; PBS: SIGTERM kill_delay seconds before), and a
// user can send one by hand (kill -USR1, or to mpiexec, which passes SIGUSR1 to every rank).
// The run then stops at the next step boundary, on every rank at the same step, writes a
// checkpoint and its report, and `spillway train` exits with kExitStopped, so a job script
// can tell "stopped, resume me" from success and from failure.
#pragma once

#include <mpi.h>

#include <string>

#include "kernels/status.hpp"

namespace spw {

// sysexits.h's EX_TEMPFAIL: a temporary failure, worth trying again (here: resuming).
inline constexpr int kExitStopped = 75;

// Asks the run to stop at the next step boundary. Async-signal-safe: a signal handler may
// call it. `signal_number` says why (shown in messages); it must not be 0.
void request_stop(int signal_number) noexcept;
// The signal of the pending request, 0 when there is none.
int stop_signal() noexcept;
void clear_stop_request() noexcept;

// Handlers for SIGUSR1 and SIGTERM that call request_stop. For programs (the spillway CLI):
// the library never touches its host's signals. Each handler is used once; the same signal
// again does what it would have done without spillway (ends the process), for a scheduler's
// or a user's second word. io_error naming the signal when sigaction refuses.
Status catch_stop_signals();

// "SIGUSR1", "SIGTERM", ... ("signal N" for a number without a name).
std::string signal_name(int signal_number);

// Collective over `comm`, called by every rank once at each step boundary: the largest
// signal any rank was asked to stop for, 0 when none was. So every rank stops after the
// same step even when only some of them got the signal, or got it during different steps.
// communication error when MPI fails.
Result<int> agree_on_stop(MPI_Comm comm);

}  // namespace spw
