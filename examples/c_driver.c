/* c_driver: trains a small byte-level GPT on the fortunes corpus over the ranks of
 * MPI_COMM_WORLD through spillway's C ABI, prints the loss of every step and checks that
 * it falls: the mean of the last 5 steps at least 1.0 below the first step's, and the loss
 * on the corpus's held-out last 5% at least 1.0 below the untrained model's.
 *
 *   mpiexec -n 2 c_driver [STEPS]      (default 30; exit 0 when the loss fell)
 *
 * The model is built by calls (2 transformer blocks of width 64) and split into one
 * pipeline stage per rank. SIGUSR1 or SIGTERM (a batch system's warning) stops it after
 * the step in progress with a checkpoint, c_driver-stopped.h5, and exit status 75. */
#include <mpi.h>
#include <spillway/spillway.h>
#include <stdio.h>
#include <stdlib.h>

/* The driver owns the process, so it, not the library, decides that a failure ends the
 * job: MPI_Abort, because a rank that failed mid-step leaves its peers waiting. */
#define CHECK(call)                                                                     \
  do {                                                                                  \
    spw_status check_status_ = (call);                                                  \
    if (check_status_ != SPW_OK) {                                                      \
      fprintf(stderr, "c_driver: %s: %s\n", spw_status_string(check_status_),           \
              spw_last_error());                                                        \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                     \
    }                                                                                   \
  } while (0)

int main(int argc, char** argv) {
  int provided = 0;
  int rank = 0;
  int size = 1;
  int64_t steps = 30;
  int64_t step;
  char stages[16];
  char plan[256];
  double first_loss = 0;
  double loss = 0;
  double last_losses = 0; /* sum over the last 5 steps */
  double per_second = 0;
  double held_out_before = 0;
  double held_out_after = 0;
  int stop_signal = 0;
  uint64_t peak = 0;
  spw_session session = NULL;
  spw_job job = NULL;
  spw_trainer trainer = NULL;

  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (argc > 1) steps = atoi(argv[1]);

  CHECK(spw_session_create(MPI_COMM_WORLD, &session));
  CHECK(spw_session_rank(session, &rank));
  CHECK(spw_session_size(session, &size));

  CHECK(spw_job_create(&job));
  CHECK(spw_job_set(job, "model.d_model", "64"));
  CHECK(spw_job_set(job, "model.heads", "2"));
  CHECK(spw_job_set(job, "model.seq", "32"));
  CHECK(spw_job_add_transformer_blocks(job, 2));
  CHECK(spw_job_set(job, "data.source", "text"));
  CHECK(spw_job_set(job, "data.holdout", "0.05"));
  CHECK(spw_job_set(job, "train.batch", "8"));
  CHECK(spw_job_set(job, "train.microbatches", "4"));
  CHECK(spw_job_set(job, "train.lr", "3e-3"));
  snprintf(stages, sizeof stages, "%d", size);
  CHECK(spw_job_set(job, "parallel.stages", stages));

  CHECK(spw_trainer_create(session, job, &trainer));
  CHECK(spw_trainer_describe_plan(trainer, plan, sizeof plan, NULL));
  if (rank == 0) printf("c_driver: %d ranks, plan: %s\n", size, plan);
  CHECK(spw_catch_stop_signals());
  CHECK(spw_trainer_evaluate(trainer, 2, &held_out_before));

  for (step = 1; step <= steps; ++step) {
    CHECK(spw_trainer_train(trainer, 1));
    CHECK(spw_trainer_stop_signal(trainer, &stop_signal));
    if (stop_signal != 0) break;
    CHECK(spw_trainer_loss(trainer, &loss));
    if (step == 1) first_loss = loss;
    if (step > steps - 5) last_losses += loss;
    if (rank == 0) printf("step %lld loss %.4f\n", (long long)step, loss);
  }
  if (stop_signal != 0) {
    /* Every rank got the same answer: all save together, and the job can resume from it. */
    CHECK(spw_trainer_save_checkpoint(trainer, "c_driver-stopped.h5"));
    if (rank == 0) {
      printf("c_driver: stopped by signal %d; checkpoint c_driver-stopped.h5\n", stop_signal);
    }
  } else {
    CHECK(spw_trainer_evaluate(trainer, 2, &held_out_after));
    CHECK(spw_trainer_throughput(trainer, &per_second));
    CHECK(spw_trainer_peak_memory(trainer, &peak));
    if (rank == 0) {
      printf("c_driver: loss %.4f -> %.4f, held out %.4f -> %.4f, median %.0f tokens/s, peak "
             "%.1f MiB on rank 0\n",
             first_loss, loss, held_out_before, held_out_after, per_second,
             (double)peak / (1024.0 * 1024.0));
    }
  }

  CHECK(spw_trainer_free(trainer));
  CHECK(spw_job_free(job));
  CHECK(spw_session_free(session));
  MPI_Finalize();
  if (stop_signal != 0) return 75; /* EX_TEMPFAIL: run again from the checkpoint */
  /* Every rank saw the same losses, so every rank reaches the same verdict. One step's
   * loss is noisy (a hard batch); the mean of the last 5 is not. */
  if (steps < 5 || !(last_losses / 5 < first_loss - 1.0) ||
      !(held_out_after < held_out_before - 1.0)) {
    if (rank == 0)
      fprintf(stderr, "c_driver: the loss did not fall by 1.0 (over at least 5 steps)\n");
    return 1;
  }
  return 0;
}
