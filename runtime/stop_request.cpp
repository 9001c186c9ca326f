#include "runtime/stop_request.hpp"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>

#include "runtime/mpi_support.hpp"

namespace spw {
namespace {

// A signal handler may only touch lock-free atomics (and volatile sig_atomic_t).
static_assert(std::atomic<int>::is_always_lock_free);
std::atomic<int> pending_signal{0};

extern "C" void on_stop_signal(int signal_number) { request_stop(signal_number); }

}  // namespace

void request_stop(int signal_number) noexcept {
  pending_signal.store(signal_number, std::memory_order_relaxed);
}

int stop_signal() noexcept { return pending_signal.load(std::memory_order_relaxed); }

void clear_stop_request() noexcept { pending_signal.store(0, std::memory_order_relaxed); }

Status catch_stop_signals() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  // SA_RESTART: system calls the signal lands in (a write, MPI's poll) carry on instead of
  // failing with EINTR. SA_RESETHAND: the second signal is not caught.
  action.sa_flags = SA_RESTART | SA_RESETHAND;
  for (const int signal_number : {SIGUSR1, SIGTERM}) {
    if (sigaction(signal_number, &action, nullptr) != 0) {
      return error(StatusCode::io_error, "cannot catch " + signal_name(signal_number) + ": " +
                                             std::strerror(errno));
    }
  }
  return Status::success();
}

std::string signal_name(int signal_number) {
  const char* abbreviation = sigabbrev_np(signal_number);
  return abbreviation != nullptr ? std::string("SIG") + abbreviation
                                 : "signal " + std::to_string(signal_number);
}

Result<int> agree_on_stop(MPI_Comm comm) {
  const int mine = stop_signal();
  int agreed = 0;
  SPW_TRY(mpi_check(MPI_Allreduce(&mine, &agreed, 1, MPI_INT, MPI_MAX, comm),
                    "agreeing on whether to stop"));
  return agreed;
}

}  // namespace spw
