// An installed spillway from C++: the C header as is, handles held by unique_ptr.
// Prints "consumer_cxx: loss X" on rank 0; exits non-zero on any failure.
// mpi.h comes through spillway.h, which leaves out MPI's deprecated C++ bindings (they would
// need libmpi_cxx); a program that includes mpi.h first defines OMPI_SKIP_MPICXX itself.
#include <spillway/spillway.h>

#include <cstdio>
#include <initializer_list>
#include <memory>
#include <type_traits>
#include <utility>

namespace {

template <class Handle, spw_status (*Free)(Handle)>
struct Deleter {
  void operator()(Handle handle) const { Free(handle); }
};
using Job = std::unique_ptr<std::remove_pointer_t<spw_job>, Deleter<spw_job, spw_job_free>>;
using Trainer =
    std::unique_ptr<std::remove_pointer_t<spw_trainer>, Deleter<spw_trainer, spw_trainer_free>>;
using Session =
    std::unique_ptr<std::remove_pointer_t<spw_session>, Deleter<spw_session, spw_session_free>>;

bool ok(spw_status status) {
  if (status != SPW_OK) std::fprintf(stderr, "consumer_cxx: %s\n", spw_last_error());
  return status == SPW_OK;
}

int run(int rank) {
  spw_session s = nullptr;
  spw_job j = nullptr;
  spw_trainer t = nullptr;
  if (!ok(spw_session_create(MPI_COMM_WORLD, &s))) return 1;
  Session session(s);
  if (!ok(spw_job_create(&j))) return 1;
  Job job(j);
  for (const auto& [key, value] : {std::pair{"model.d_model", "32"}, {"model.heads", "2"},
                                   {"model.seq", "16"}, {"data.source", "synthetic"},
                                   {"train.batch", "4"}, {"parallel.stages", "2"}}) {
    if (!ok(spw_job_set(job.get(), key, value))) return 1;
  }
  if (!ok(spw_job_add_transformer_blocks(job.get(), 2))) return 1;
  if (!ok(spw_trainer_create(session.get(), job.get(), &t))) return 1;
  Trainer trainer(t);
  double loss = 0;
  if (!ok(spw_trainer_train(trainer.get(), 2)) || !ok(spw_trainer_loss(trainer.get(), &loss))) {
    return 1;
  }
  if (rank == 0) std::printf("consumer_cxx: loss %.4f\n", loss);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  int rank = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int code = run(rank);  // every handle is freed before MPI_Finalize
  MPI_Finalize();
  return code;
}
