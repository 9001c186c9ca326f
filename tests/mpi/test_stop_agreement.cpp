// Ranks agree on stopping: a request on any rank stops every rank after the same step.
#include <gtest/gtest.h>
#include <mpi.h>

#include <csignal>

#include "runtime/stop_request.hpp"

namespace spw {
namespace {

int agreed() {
  auto stop = agree_on_stop(MPI_COMM_WORLD);
  EXPECT_TRUE(stop.ok()) << stop.status().message();
  return stop.ok() ? *stop : -1;
}

TEST(AgreeOnStop, EveryRankLearnsOfARequestOnAnyRank) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  clear_stop_request();
  EXPECT_EQ(agreed(), 0);
  // Only the last rank was signalled.
  if (rank == size - 1) request_stop(SIGUSR1);
  EXPECT_EQ(agreed(), SIGUSR1) << "rank " << rank;
  // Different signals on different ranks: all agree on one of them.
  clear_stop_request();
  if (rank == 0) request_stop(SIGUSR1);
  if (rank == 1) request_stop(SIGTERM);
  EXPECT_EQ(agreed(), SIGTERM) << "rank " << rank;
  clear_stop_request();
  EXPECT_EQ(agreed(), 0);
}

}  // namespace
}  // namespace spw
