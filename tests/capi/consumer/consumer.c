/* An installed spillway from C: two steps of a tiny GPT on the ranks of MPI_COMM_WORLD.
 * Prints "consumer_c: loss X" on rank 0; exits non-zero on any failure. */
#include <mpi.h>
#include <spillway/spillway.h>
#include <stdio.h>

static int failed(spw_status status) {
  if (status != SPW_OK) fprintf(stderr, "consumer_c: %s\n", spw_last_error());
  return status != SPW_OK;
}

int main(int argc, char** argv) {
  int provided = 0, rank = 0, bad = 0;
  double loss = 0;
  spw_session session = NULL;
  spw_job job = NULL;
  spw_trainer trainer = NULL;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  bad = failed(spw_session_create(MPI_COMM_WORLD, &session)) ||
        failed(spw_job_create_from_string(
            "[model]\nlayers = 2\nd_model = 32\nheads = 2\nseq = 16\n"
            "[data]\nsource = \"synthetic\"\n[train]\nbatch = 4\nmicrobatches = 2\n",
            &job)) ||
        failed(spw_job_set(job, "parallel.stages", "2")) ||
        failed(spw_trainer_create(session, job, &trainer)) ||
        failed(spw_trainer_train(trainer, 2)) || failed(spw_trainer_loss(trainer, &loss));
  if (!bad && rank == 0) printf("consumer_c: loss %.4f\n", loss);
  spw_trainer_free(trainer);
  spw_job_free(job);
  spw_session_free(session);
  MPI_Finalize();
  return bad;
}
