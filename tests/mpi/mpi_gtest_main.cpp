// GoogleTest under mpiexec, as Ginkgo runs its MPI tests: every rank runs every test (they
// are collective), only rank 0 prints, and the process exit code is the same on all ranks:
// non-zero when a test failed on any of them.
#include <gtest/gtest.h>
#include <mpi.h>

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int local = RUN_ALL_TESTS();
  int any = 0;
  MPI_Allreduce(&local, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && local == 0 && any != 0) {
    std::fprintf(stderr, "a test failed on another rank (rank 0 passed)\n");
  }
  MPI_Finalize();
  return any;
}
