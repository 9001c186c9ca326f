// A stop request: set from a signal handler, read at step boundaries; the handlers catch one
// signal each and leave the second to its default action. The signal tests run in a child
// process (EXPECT_EXIT), so this process keeps its own handlers.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>

#include "runtime/stop_request.hpp"

namespace spw {
namespace {

TEST(StopRequest, IsSetReadAndCleared) {
  clear_stop_request();
  EXPECT_EQ(stop_signal(), 0);
  request_stop(SIGUSR1);
  EXPECT_EQ(stop_signal(), SIGUSR1);
  request_stop(SIGTERM);
  EXPECT_EQ(stop_signal(), SIGTERM);
  clear_stop_request();
  EXPECT_EQ(stop_signal(), 0);
}

TEST(StopRequest, NamesSignals) {
  EXPECT_EQ(signal_name(SIGUSR1), "SIGUSR1");
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
  EXPECT_EQ(signal_name(1000), "signal 1000");
}

// The child exits 0 only if the signal became a request and the process lived on.
void expect_caught(int signal_number) {
  EXPECT_EXIT(
      {
        clear_stop_request();
        if (!catch_stop_signals().ok()) std::_Exit(2);
        std::raise(signal_number);
        std::_Exit(stop_signal() == signal_number ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
}

TEST(StopSignals, UserSignalOneAndTerminateBecomeStopRequests) {
  expect_caught(SIGUSR1);
  expect_caught(SIGTERM);
}

TEST(StopSignals, TheSecondSignalIsNotCaught) {
  EXPECT_EXIT(
      {
        if (!catch_stop_signals().ok()) std::_Exit(2);
        std::raise(SIGTERM);
        std::raise(SIGTERM);
        std::_Exit(0);
      },
      testing::KilledBySignal(SIGTERM), "");
}

}  // namespace
}  // namespace spw
