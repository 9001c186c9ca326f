/* capi_test: every function of spillway.h, on good input and on each kind of bad input the
 * header documents (NULL handles and pointers, freed handles, handles of another type,
 * sizes that do not fit, counts below 1, calls out of order, MPI not initialised or
 * already finalised), checking the status, the message and the state left behind.
 *
 *   mpiexec -n N capi_test SCRATCH_DIR     (N = 1 or 2; exit 0 when every check passed)
 *
 * Some checks need one rank (a trainer that fails mid-step strands no peer there) and some
 * two (ranks that disagree); each runs where it can. */
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <spillway/spillway.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int failures = 0;
static int checks = 0;
static int rank = 0;
static int size = 1;

static void check(int ok, const char* what, int line) {
  ++checks;
  if (!ok) {
    ++failures;
    fprintf(stderr, "rank %d: FAIL (line %d): %s\n", rank, line, what);
  }
}
#define CHECK(condition) check((condition) ? 1 : 0, #condition, __LINE__)

/* The call returns `code` and, unless `text` is NULL, spw_last_error() contains `text`. */
static void expect(spw_status got, spw_status code, const char* text, const char* call,
                   int line) {
  char what[512];
  const char* message = spw_last_error();
  int ok = got == code && (text == NULL || strstr(message, text) != NULL);
  if (code == SPW_OK) ok = ok && message[0] == '\0';
  snprintf(what, sizeof what, "%s: expected %s%s%s, got %s: \"%s\"", call,
           spw_status_string(code), text ? " with " : "", text ? text : "",
           spw_status_string(got), message);
  check(ok, what, line);
}
#define EXPECT(call, code, text) expect((call), (code), (text), #call, __LINE__)
#define EXPECT_OK(call) expect((call), SPW_OK, NULL, #call, __LINE__)

static const char* tiny_gpt =
    "[model]\nkind = \"gpt\"\nlayers = 2\nd_model = 32\nheads = 2\nseq = 16\n"
    "[data]\nsource = \"synthetic\"\n"
    "[train]\nbatch = 8\nmicrobatches = 4\n";

static int file_exists(const char* path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* A tiny GPT on synthetic tokens, one stage per rank unless `stages` says otherwise. */
static spw_job tiny_job(const char* stages) {
  spw_job job = NULL;
  char count[16];
  EXPECT_OK(spw_job_create_from_string(tiny_gpt, &job));
  snprintf(count, sizeof count, "%d", size);
  EXPECT_OK(spw_job_set(job, "parallel.stages", stages ? stages : count));
  return job;
}

static void before_mpi(void) {
  spw_session session = NULL;
  int major = -1, minor = -1, patch = -1;
  int code;

  EXPECT(spw_session_create(MPI_COMM_WORLD, &session), SPW_ERR_BAD_STATE,
         "MPI is not initialized: call MPI_Init_thread");
  EXPECT(spw_session_create_f(0, &session), SPW_ERR_BAD_STATE, "MPI is not initialized");
  CHECK(session == NULL);

  /* Every code has its own description; a value outside the enum has one too. */
  for (code = SPW_OK; code <= SPW_ERR_BAD_STATE; ++code) {
    int other;
    CHECK(strcmp(spw_status_string((spw_status)code), "unknown status") != 0);
    for (other = SPW_OK; other < code; ++other) {
      CHECK(strcmp(spw_status_string((spw_status)code), spw_status_string((spw_status)other)) != 0);
    }
  }
  CHECK(strcmp(spw_status_string((spw_status)99), "unknown status") == 0);
  CHECK(strcmp(spw_status_string(SPW_ERR_CONFIG), "configuration error") == 0);

  EXPECT_OK(spw_get_version(&major, &minor, &patch));
  CHECK(major == SPW_VERSION_MAJOR && minor == SPW_VERSION_MINOR && patch == SPW_VERSION_PATCH);
  EXPECT(spw_get_version(&major, NULL, &patch), SPW_ERR_NULL_HANDLE, "spw_get_version: ");
}

static void sessions(void) {
  spw_session session = NULL, freed = NULL, from_fortran = NULL;
  spw_job job = NULL;
  int value = -1;

  EXPECT(spw_session_create(MPI_COMM_WORLD, NULL), SPW_ERR_NULL_HANDLE, "session is NULL");
  EXPECT(spw_session_create(MPI_COMM_NULL, &session), SPW_ERR_INVALID_ARGUMENT,
         "comm is MPI_COMM_NULL");
  EXPECT(spw_session_create_f(MPI_Comm_c2f(MPI_COMM_NULL), &session), SPW_ERR_INVALID_ARGUMENT,
         "is not a Fortran communicator handle");
  EXPECT(spw_session_create_f(-5, &session), SPW_ERR_INVALID_ARGUMENT,
         "comm -5 is not a Fortran communicator handle");
  CHECK(session == NULL);

  EXPECT_OK(spw_session_create_f(MPI_Comm_c2f(MPI_COMM_WORLD), &from_fortran));
  EXPECT_OK(spw_session_rank(from_fortran, &value));
  CHECK(value == rank);
  EXPECT_OK(spw_session_free(from_fortran));

  EXPECT_OK(spw_session_create(MPI_COMM_WORLD, &session));
  EXPECT_OK(spw_session_rank(session, &value));
  CHECK(value == rank);
  EXPECT_OK(spw_session_size(session, &value));
  CHECK(value == size);
  EXPECT(spw_session_rank(NULL, &value), SPW_ERR_NULL_HANDLE,
         "spw_session_rank: session is NULL: create it with spw_session_create");
  EXPECT(spw_session_rank(session, NULL), SPW_ERR_NULL_HANDLE, "rank is NULL");
  EXPECT(spw_session_size(NULL, &value), SPW_ERR_NULL_HANDLE, "session is NULL");
  EXPECT(spw_session_size(session, NULL), SPW_ERR_NULL_HANDLE, "size is NULL");

  /* A handle of another type is recognised, not dereferenced. */
  EXPECT_OK(spw_job_create(&job));
  EXPECT(spw_session_rank((spw_session)job, &value), SPW_ERR_BAD_STATE,
         "session is an spw_job, not an spw_session");
  EXPECT(spw_job_check((spw_job)session), SPW_ERR_BAD_STATE, "job is an spw_session");
  EXPECT_OK(spw_job_free(job));

  EXPECT_OK(spw_session_create(MPI_COMM_WORLD, &freed));
  EXPECT_OK(spw_session_free(freed));
  EXPECT(spw_session_rank(freed, &value), SPW_ERR_BAD_STATE,
         "session is not a live spw_session (freed already, or never created)");
  EXPECT(spw_session_size(freed, &value), SPW_ERR_BAD_STATE, "not a live spw_session");
  EXPECT(spw_session_free(freed), SPW_ERR_BAD_STATE, "spw_session_free: session is not a live");
  EXPECT_OK(spw_session_free(NULL));
  EXPECT_OK(spw_session_free(session));
}

static void jobs(const char* scratch) {
  spw_job job = NULL, freed = NULL;
  char path[512];
  FILE* file;

  EXPECT(spw_job_create(NULL), SPW_ERR_NULL_HANDLE, "job is NULL");
  EXPECT(spw_job_create_from_string(NULL, &job), SPW_ERR_NULL_HANDLE, "toml is NULL");
  EXPECT(spw_job_create_from_string("", NULL), SPW_ERR_NULL_HANDLE, "job is NULL");
  EXPECT(spw_job_create_from_string("[model]\nlayers = \n", &job), SPW_ERR_CONFIG,
         "job string:2:");
  EXPECT(spw_job_create_from_string("[model]\nlayers = 0\n", &job), SPW_ERR_CONFIG,
         "job string:2: ");
  EXPECT(spw_job_create_from_string("[trian]\nlr = 0.1\n", &job), SPW_ERR_CONFIG,
         "did you mean 'train'");
  EXPECT(spw_job_create_from_file(NULL, &job), SPW_ERR_NULL_HANDLE, "path is NULL");
  EXPECT(spw_job_create_from_file("job.toml", NULL), SPW_ERR_NULL_HANDLE, "job is NULL");
  EXPECT(spw_job_create_from_file("/nonexistent/job.toml", &job), SPW_ERR_NOT_FOUND,
         "job file '/nonexistent/job.toml' does not exist");
  EXPECT(spw_job_create_from_file(scratch, &job), SPW_ERR_IO, "it is a directory");
  snprintf(path, sizeof path, "%s/bad-%d.toml", scratch, rank);
  file = fopen(path, "w");
  fputs("[train]\nbatch = 8\nmicrobatches = 3\n", file);
  fclose(file);
  EXPECT(spw_job_create_from_file(path, &job), SPW_ERR_CONFIG, "'train.microbatches' (3)");
  CHECK(job == NULL);
  snprintf(path, sizeof path, "%s/good-%d.toml", scratch, rank);
  file = fopen(path, "w");
  fputs(tiny_gpt, file);
  fclose(file);
  EXPECT_OK(spw_job_create_from_file(path, &job));
  EXPECT_OK(spw_job_check(job));
  EXPECT_OK(spw_job_free(job));

  /* spw_job_set checks the key and the TOML at once, values with the whole job. */
  EXPECT_OK(spw_job_create(&job));
  EXPECT_OK(spw_job_check(job));
  EXPECT(spw_job_set(NULL, "train.lr", "0.1"), SPW_ERR_NULL_HANDLE, "job is NULL");
  EXPECT(spw_job_set(job, NULL, "0.1"), SPW_ERR_NULL_HANDLE, "key is NULL");
  EXPECT(spw_job_set(job, "train.lr", NULL), SPW_ERR_NULL_HANDLE, "value is NULL");
  EXPECT(spw_job_set(job, "train.lrr", "0.1"), SPW_ERR_CONFIG,
         "spw_job_set train.lrr=0.1: unknown key 'train.lrr' (did you mean 'train.lr'?)");
  EXPECT(spw_job_set(job, "lr", "0.1"), SPW_ERR_CONFIG, "expected section.key=value");
  EXPECT(spw_job_set(job, "train.lr=0.1", "0.1"), SPW_ERR_CONFIG, "contains '='");
  EXPECT(spw_job_set(job, "parallel.stages", "[[0, 1]"), SPW_ERR_CONFIG,
         "not a valid TOML value");
  EXPECT_OK(spw_job_set(job, "train.lr", "-1"));
  EXPECT(spw_job_check(job), SPW_ERR_CONFIG, "spw_job_check: spw_job_set train.lr=-1: ");
  EXPECT_OK(spw_job_set(job, "train.lr", "0.01"));
  EXPECT_OK(spw_job_check(job));
  EXPECT_OK(spw_job_set(job, "train.microbatches", "3"));
  EXPECT(spw_job_check(job), SPW_ERR_CONFIG, "'train.microbatches' (3)");
  EXPECT_OK(spw_job_set(job, "train.microbatches", "4"));
  EXPECT_OK(spw_job_check(job));
  /* Without a length the job cannot end a decay at the run's last step: it must say where. */
  EXPECT_OK(spw_job_set(job, "train.lr_decay", "\"cosine\""));
  EXPECT(spw_job_check(job), SPW_ERR_CONFIG,
         "train.lr_decay = \"cosine\" needs train.decay_steps (or train.steps)");
  EXPECT_OK(spw_job_set(job, "train.decay_steps", "100"));
  EXPECT_OK(spw_job_check(job));
  EXPECT_OK(spw_job_set(job, "train.lr_decay", "\"constant\""));
  EXPECT(spw_job_check(job), SPW_ERR_CONFIG, "'train.decay_steps' needs a decay");
  EXPECT_OK(spw_job_set(job, "train.lr_decay", "\"linear\""));
  /* A job that says how long to train keeps it; exactly one of the two is allowed. */
  EXPECT_OK(spw_job_set(job, "train.epochs", "1"));
  EXPECT_OK(spw_job_check(job));
  EXPECT_OK(spw_job_set(job, "train.steps", "5"));
  EXPECT(spw_job_check(job), SPW_ERR_CONFIG, "train.");
  EXPECT_OK(spw_job_free(job));

  /* An MLP by calls, and the calls out of order. */
  EXPECT_OK(spw_job_create(&job));
  EXPECT(spw_job_add_dense(job, 10), SPW_ERR_BAD_STATE,
         "call spw_job_set_input before spw_job_add_dense");
  EXPECT(spw_job_set_input(job, 0), SPW_ERR_INVALID_ARGUMENT,
         "the input width must be at least 1, got 0");
  EXPECT(spw_job_set_input(NULL, 784), SPW_ERR_NULL_HANDLE, "job is NULL");
  EXPECT_OK(spw_job_set_input(job, 784));
  EXPECT(spw_job_check(job), SPW_ERR_BAD_STATE, "add at least one with spw_job_add_dense");
  EXPECT(spw_job_set_input(job, 784), SPW_ERR_BAD_STATE, "the input width is set already (784)");
  EXPECT(spw_job_add_dense(job, -2), SPW_ERR_INVALID_ARGUMENT, "at least 1, got -2");
  EXPECT(spw_job_add_dense(NULL, 10), SPW_ERR_NULL_HANDLE, "job is NULL");
  EXPECT_OK(spw_job_add_dense(job, 64));
  EXPECT_OK(spw_job_add_dense(job, 10));
  EXPECT(spw_job_add_transformer_blocks(job, 2), SPW_ERR_BAD_STATE, "begun as an MLP");
  EXPECT(spw_job_set(job, "model.dims", "[1, 2]"), SPW_ERR_BAD_STATE,
         "model.dims belongs to the model built by calls");
  EXPECT_OK(spw_job_check(job));
  EXPECT_OK(spw_job_free(job));

  /* A GPT by calls. */
  EXPECT_OK(spw_job_create(&job));
  EXPECT(spw_job_add_transformer_blocks(job, 0), SPW_ERR_INVALID_ARGUMENT,
         "the block count must be at least 1, got 0");
  EXPECT(spw_job_add_transformer_blocks(NULL, 1), SPW_ERR_NULL_HANDLE, "job is NULL");
  EXPECT_OK(spw_job_add_transformer_blocks(job, 1));
  EXPECT_OK(spw_job_add_transformer_blocks(job, 2));
  EXPECT(spw_job_set_input(job, 8), SPW_ERR_BAD_STATE, "begun as a GPT");
  EXPECT(spw_job_set(job, "model.layers", "5"), SPW_ERR_BAD_STATE, "model.layers belongs to");
  EXPECT_OK(spw_job_set(job, "model.d_model", "48"));
  EXPECT_OK(spw_job_set(job, "model.heads", "5"));
  EXPECT(spw_job_check(job), SPW_ERR_CONFIG,
         "spw_job_set model.d_model=48: 'model.d_model' (48) must be divisible by "
         "'model.heads' (5)");
  EXPECT_OK(spw_job_free(job));

  /* spw_job_set of the model's keys first, then calls that would build it. */
  EXPECT_OK(spw_job_create(&job));
  EXPECT_OK(spw_job_set(job, "model.kind", "mlp"));
  EXPECT(spw_job_set_input(job, 8), SPW_ERR_BAD_STATE, "model.kind was set by spw_job_set");
  EXPECT(spw_job_add_transformer_blocks(job, 1), SPW_ERR_BAD_STATE,
         "model.kind was set by spw_job_set");
  EXPECT(spw_job_check(job), SPW_ERR_CONFIG, "model.dims");
  EXPECT_OK(spw_job_free(job));

  /* Freed jobs. */
  EXPECT_OK(spw_job_create(&freed));
  EXPECT_OK(spw_job_free(freed));
  EXPECT(spw_job_set(freed, "train.lr", "0.1"), SPW_ERR_BAD_STATE, "job is not a live spw_job");
  EXPECT(spw_job_set_input(freed, 8), SPW_ERR_BAD_STATE, "not a live spw_job");
  EXPECT(spw_job_add_dense(freed, 8), SPW_ERR_BAD_STATE, "not a live spw_job");
  EXPECT(spw_job_add_transformer_blocks(freed, 1), SPW_ERR_BAD_STATE, "not a live spw_job");
  EXPECT(spw_job_check(freed), SPW_ERR_BAD_STATE, "not a live spw_job");
  EXPECT(spw_job_free(freed), SPW_ERR_BAD_STATE, "spw_job_free: job is not a live spw_job");
  EXPECT_OK(spw_job_free(NULL));
}

static void trainer_setup_errors(spw_session session, const char* scratch) {
  spw_trainer trainer = NULL;
  spw_session freed_session = NULL;
  spw_job job = tiny_job(NULL), freed_job = NULL;
  char dir[512];

  EXPECT(spw_trainer_create(NULL, job, &trainer), SPW_ERR_NULL_HANDLE, "session is NULL");
  EXPECT_OK(spw_session_create(MPI_COMM_WORLD, &freed_session));
  EXPECT_OK(spw_session_free(freed_session));
  EXPECT(spw_trainer_create(freed_session, job, &trainer), SPW_ERR_BAD_STATE,
         "session is not a live spw_session");
  EXPECT(spw_trainer_create(session, NULL, &trainer), SPW_ERR_NULL_HANDLE, "job is NULL");
  EXPECT(spw_trainer_create(session, job, NULL), SPW_ERR_NULL_HANDLE, "trainer is NULL");
  EXPECT_OK(spw_job_create(&freed_job));
  EXPECT_OK(spw_job_free(freed_job));
  EXPECT(spw_trainer_create(session, freed_job, &trainer), SPW_ERR_BAD_STATE,
         "job is not a live spw_job");
  if (size > 1) {
    /* One rank's mistake reaches every rank, named, instead of leaving them waiting. */
    EXPECT(spw_trainer_create(session, rank == 1 ? NULL : job, &trainer), SPW_ERR_NULL_HANDLE,
           "spw_trainer_create: rank 1: job is NULL");
  }

  EXPECT_OK(spw_job_set(job, "train.lr", "-1"));
  EXPECT(spw_trainer_create(session, job, &trainer), SPW_ERR_CONFIG,
         "spw_job_set train.lr=-1: ");
  EXPECT_OK(spw_job_set(job, "train.lr", "1e-3"));
  EXPECT_OK(spw_job_set(job, "parallel.stages", "3"));
  EXPECT(spw_trainer_create(session, job, &trainer), SPW_ERR_INVALID_ARGUMENT,
         "need 3 ranks");
  EXPECT_OK(spw_job_set(job, "parallel.stages", "[[0, 1], [2, 2]]"));
  EXPECT(spw_trainer_create(session, job, &trainer), SPW_ERR_INVALID_ARGUMENT, "");
  EXPECT_OK(spw_job_set(job, "parallel.stages", size == 1 ? "1" : "2"));
  EXPECT_OK(spw_job_set(job, "output.checkpoint_every", "10"));
  EXPECT(spw_trainer_create(session, job, &trainer), SPW_ERR_UNSUPPORTED,
         "call spw_trainer_save_checkpoint");
  EXPECT_OK(spw_job_set(job, "output.checkpoint_every", "0"));
  EXPECT_OK(spw_job_set(job, "eval.every", "5"));
  EXPECT_OK(spw_job_set(job, "output.keep_best", "true"));
  EXPECT(spw_trainer_create(session, job, &trainer), SPW_ERR_UNSUPPORTED,
         "output.keep_best is not used through the C ABI");
  EXPECT_OK(spw_job_set(job, "output.keep_best", "false"));
  EXPECT_OK(spw_job_set(job, "eval.every", "0"));
  EXPECT_OK(spw_job_set(job, "train.init_from", "/nonexistent/weights.h5"));
  EXPECT(spw_trainer_create(session, job, &trainer), SPW_ERR_NOT_FOUND, "");
  CHECK(trainer == NULL);
  EXPECT_OK(spw_job_free(job));

  /* A model no node holds (51,540,494,254,080 parameters, 750 TiB with their gradients and
   * AdamW state) is refused before it is allocated, naming the node's budget, instead of the
   * kernel ending the host; with "auto" before the ranks profile it. */
  job = tiny_job(NULL);
  EXPECT_OK(spw_job_set(job, "model.d_model", "65536"));
  EXPECT_OK(spw_job_set(job, "model.layers", "1000"));
  EXPECT(spw_trainer_create(session, job, &trainer), SPW_ERR_OUT_OF_MEMORY,
         "this node's memory exceeded: need 750.0 TiB for the parameters, gradients and "
         "optimizer state of ");
  EXPECT_OK(spw_job_set(job, "parallel.stages", "\"auto\""));
  EXPECT(spw_trainer_create(session, job, &trainer), SPW_ERR_OUT_OF_MEMORY,
         "the model needs 750.0 TiB for its parameters, gradients and optimizer state");
  CHECK(trainer == NULL);
  EXPECT_OK(spw_job_free(job));

  /* Explicit stages create no output directory; the planner caches its measurements in
   * output.dir. */
  snprintf(dir, sizeof dir, "%s/explicit", scratch);
  job = tiny_job(NULL);
  EXPECT_OK(spw_job_set(job, "output.dir", dir));
  EXPECT_OK(spw_trainer_create(session, job, &trainer));
  EXPECT_OK(spw_trainer_free(trainer));
  CHECK(!file_exists(dir));
  EXPECT_OK(spw_job_free(job));
}

/* A trainer used in and out of order: plan text, steps, figures, checkpoints. */
/* Stop requests: one on the last rank alone stops every rank after the same step; the call
 * reports it on every rank and takes it, so the next call runs whole. The handlers turn a
 * signal into a request. */
/* Held-out evaluation: the same loss on every rank and at every call, training untouched;
 * bad counts and text without a held-out part refused with the trainer still usable. */
static void evaluations(spw_session session, spw_trainer trainer) {
  double loss = -1, again = -1, highest = 0;
  int64_t steps = 0;
  spw_job text_job = NULL;
  spw_trainer text = NULL;

  EXPECT(spw_trainer_evaluate(NULL, 1, &loss), SPW_ERR_NULL_HANDLE, "trainer is NULL");
  EXPECT(spw_trainer_evaluate(trainer, 1, NULL), SPW_ERR_NULL_HANDLE, "loss is NULL");
  EXPECT(spw_trainer_evaluate(trainer, 0, &loss), SPW_ERR_INVALID_ARGUMENT,
         "batches must be at least 1, got 0");
  if (size > 1) {
    EXPECT(spw_trainer_evaluate(trainer, rank == 0 ? 1 : 2, &loss), SPW_ERR_INVALID_ARGUMENT,
           "the ranks asked for different batch counts (from 1 to 2)");
  }
  CHECK(loss == -1);  /* untouched on failure */
  EXPECT_OK(spw_trainer_evaluate(trainer, 2, &loss));
  EXPECT_OK(spw_trainer_evaluate(trainer, 2, &again));
  CHECK(loss == again);
  /* Held-out synthetic tokens are uniform too: near ln 256 = 5.55 after 3 steps. */
  CHECK(loss > 5.0 && loss < 6.5);
  MPI_Allreduce(&loss, &highest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  CHECK(highest == loss);
  EXPECT_OK(spw_trainer_steps_done(trainer, &steps));
  CHECK(steps == 3);

  text_job = tiny_job(NULL);
  EXPECT_OK(spw_job_set(text_job, "data.source", "\"text\""));
  EXPECT_OK(spw_trainer_create(session, text_job, &text));
  EXPECT_OK(spw_job_free(text_job));
  EXPECT(spw_trainer_evaluate(text, 1, &loss), SPW_ERR_INVALID_ARGUMENT,
         "evaluating on text needs held-out text: set data.holdout");
  EXPECT_OK(spw_trainer_train(text, 1));  /* still usable */
  EXPECT_OK(spw_trainer_free(text));
}

static void stop_requests(spw_trainer trainer) {
  int64_t before = 0, after = 0;
  int signal_number = -1;
  EXPECT(spw_trainer_stop_signal(NULL, &signal_number), SPW_ERR_NULL_HANDLE,
         "trainer is NULL");
  EXPECT(spw_trainer_stop_signal(trainer, NULL), SPW_ERR_NULL_HANDLE,
         "signal_number is NULL");
  EXPECT_OK(spw_trainer_stop_signal(trainer, &signal_number));
  CHECK(signal_number == 0);  /* the calls before ran all their steps */
  EXPECT_OK(spw_trainer_steps_done(trainer, &before));
  spw_request_stop(0);  /* ignored */
  EXPECT_OK(spw_trainer_train(trainer, 2));
  EXPECT_OK(spw_trainer_stop_signal(trainer, &signal_number));
  CHECK(signal_number == 0);
  if (rank == size - 1) spw_request_stop(SIGUSR1);
  EXPECT_OK(spw_trainer_train(trainer, 5));
  EXPECT_OK(spw_trainer_steps_done(trainer, &after));
  CHECK(after == before + 3);
  EXPECT_OK(spw_trainer_stop_signal(trainer, &signal_number));
  CHECK(signal_number == SIGUSR1);
  EXPECT_OK(spw_trainer_train(trainer, 2));
  EXPECT_OK(spw_trainer_steps_done(trainer, &after));
  CHECK(after == before + 5);
  EXPECT_OK(spw_trainer_stop_signal(trainer, &signal_number));
  CHECK(signal_number == 0);
  /* Through the handlers, on rank 0 alone. */
  EXPECT_OK(spw_catch_stop_signals());
  if (rank == 0) raise(SIGTERM);
  EXPECT_OK(spw_trainer_train(trainer, 4));
  EXPECT_OK(spw_trainer_steps_done(trainer, &after));
  CHECK(after == before + 6);
  EXPECT_OK(spw_trainer_stop_signal(trainer, &signal_number));
  CHECK(signal_number == SIGTERM);
}

/* A trainer of the tiny job with `key` set to `value` refuses the checkpoint at `path`
 * (SPW_ERR_SHAPE_MISMATCH, the message holding `text`) and trains on unchanged. */
static void refused_checkpoint(spw_session session, const char* path, const char* key,
                               const char* value, const char* text) {
  spw_job job = tiny_job(NULL);
  spw_trainer trainer = NULL;
  EXPECT_OK(spw_job_set(job, key, value));
  EXPECT_OK(spw_trainer_create(session, job, &trainer));
  EXPECT_OK(spw_job_free(job));
  EXPECT(spw_trainer_load_checkpoint(trainer, path), SPW_ERR_SHAPE_MISMATCH, text);
  EXPECT_OK(spw_trainer_train(trainer, 1)); /* still usable */
  EXPECT_OK(spw_trainer_free(trainer));
}

static void training(spw_session session, const char* scratch) {
  spw_trainer trainer = NULL;
  spw_job job = tiny_job(NULL);
  char plan[512];
  char path[512];
  char expected[64];
  size_t needed = 0, again = 0;
  int64_t steps = -1;
  double loss = -1, per_second = -1, before[2], after[2], highest = 0;
  uint64_t peak = 0;
  int signal_number = -1;

  EXPECT_OK(spw_trainer_create(session, job, &trainer));
  EXPECT_OK(spw_job_free(job));  /* the trainer keeps its own copy */

  /* The plan text, with every size case of the buffer. */
  EXPECT(spw_trainer_describe_plan(NULL, plan, sizeof plan, &needed), SPW_ERR_NULL_HANDLE,
         "trainer is NULL");
  EXPECT(spw_trainer_describe_plan(trainer, NULL, 0, NULL), SPW_ERR_NULL_HANDLE,
         "buffer and needed are both NULL");
  EXPECT_OK(spw_trainer_describe_plan(trainer, NULL, 0, &needed));
  snprintf(expected, sizeof expected, "%d stage%s x 1 replica, 1f1b, 4 microbatches of 2", size,
           size == 1 ? "" : "s");
  CHECK(needed == strlen(expected) + strlen(" per replica") + 1);
  EXPECT(spw_trainer_describe_plan(trainer, NULL, 8, &again), SPW_ERR_INVALID_ARGUMENT,
         "buffer is NULL but size is 8");
  strcpy(plan, "untouched");
  EXPECT(spw_trainer_describe_plan(trainer, plan, 4, &again), SPW_ERR_INVALID_ARGUMENT,
         "a buffer of 4 bytes is too small for the plan: it needs");
  CHECK(again == needed && plan[0] == '\0');
  EXPECT(spw_trainer_describe_plan(trainer, plan, needed - 1, NULL), SPW_ERR_INVALID_ARGUMENT,
         "too small");
  EXPECT_OK(spw_trainer_describe_plan(trainer, plan, needed, NULL));
  CHECK(strlen(plan) + 1 == needed && strstr(plan, expected) == plan);

  /* Figures before any step. */
  EXPECT(spw_trainer_loss(trainer, &loss), SPW_ERR_BAD_STATE,
         "no step has run yet: call spw_trainer_train first");
  EXPECT(spw_trainer_throughput(trainer, &per_second), SPW_ERR_BAD_STATE, "no step has run yet");
  EXPECT_OK(spw_trainer_steps_done(trainer, &steps));
  CHECK(steps == 0);
  EXPECT_OK(spw_trainer_peak_memory(trainer, &peak));
  CHECK(peak > 0);
  EXPECT(spw_trainer_loss(NULL, &loss), SPW_ERR_NULL_HANDLE, "trainer is NULL");
  EXPECT(spw_trainer_loss(trainer, NULL), SPW_ERR_NULL_HANDLE, "loss is NULL");
  EXPECT(spw_trainer_throughput(NULL, &per_second), SPW_ERR_NULL_HANDLE, "trainer is NULL");
  EXPECT(spw_trainer_throughput(trainer, NULL), SPW_ERR_NULL_HANDLE, "per_second is NULL");
  EXPECT(spw_trainer_steps_done(NULL, &steps), SPW_ERR_NULL_HANDLE, "trainer is NULL");
  EXPECT(spw_trainer_steps_done(trainer, NULL), SPW_ERR_NULL_HANDLE, "steps is NULL");
  EXPECT(spw_trainer_peak_memory(NULL, &peak), SPW_ERR_NULL_HANDLE, "trainer is NULL");
  EXPECT(spw_trainer_peak_memory(trainer, NULL), SPW_ERR_NULL_HANDLE, "bytes is NULL");

  /* Step counts: below 1 and disagreeing ranks are refused, and the trainer carries on. */
  EXPECT(spw_trainer_train(NULL, 1), SPW_ERR_NULL_HANDLE, "trainer is NULL");
  EXPECT(spw_trainer_train(trainer, 0), SPW_ERR_INVALID_ARGUMENT,
         "steps must be at least 1, got 0");
  EXPECT(spw_trainer_train(trainer, -3), SPW_ERR_INVALID_ARGUMENT, "got -3");
  EXPECT(spw_trainer_train(trainer, INT64_MIN), SPW_ERR_INVALID_ARGUMENT, "at least 1");
  if (size > 1) {
    EXPECT(spw_trainer_train(trainer, rank == 0 ? 2 : 3), SPW_ERR_INVALID_ARGUMENT,
           "the ranks asked for different step counts (from 2 to 3)");
  }
  EXPECT_OK(spw_trainer_steps_done(trainer, &steps));
  CHECK(steps == 0);
  EXPECT_OK(spw_trainer_train(trainer, 3));
  EXPECT_OK(spw_trainer_steps_done(trainer, &steps));
  CHECK(steps == 3);
  EXPECT_OK(spw_trainer_loss(trainer, &loss));
  /* Synthetic tokens are uniform over 256 values: the loss starts near ln 256 = 5.55. */
  CHECK(loss > 5.0 && loss < 6.5);
  MPI_Allreduce(&loss, &highest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  CHECK(highest == loss);  /* the same on every rank */
  EXPECT_OK(spw_trainer_throughput(trainer, &per_second));
  CHECK(per_second > 0 && isfinite(per_second));

  evaluations(session, trainer);

  /* The session cannot go while the trainer runs on it. */
  EXPECT(spw_session_free(session), SPW_ERR_BAD_STATE,
         "1 trainer(s) still run on this session: free them with spw_trainer_free first");

  /* Checkpoints: save, train on, load, and the same steps give the same losses. */
  snprintf(path, sizeof path, "%s/tiny-%d.h5", scratch, size);
  EXPECT(spw_trainer_save_checkpoint(NULL, path), SPW_ERR_NULL_HANDLE, "trainer is NULL");
  EXPECT(spw_trainer_save_checkpoint(trainer, NULL), SPW_ERR_NULL_HANDLE, "path is NULL");
  EXPECT(spw_trainer_save_checkpoint(trainer, "/nonexistent/dir/x.h5"), SPW_ERR_IO, "");
  EXPECT_OK(spw_trainer_save_checkpoint(trainer, path));
  CHECK(file_exists(path));
  EXPECT_OK(spw_trainer_train(trainer, 1));
  EXPECT_OK(spw_trainer_loss(trainer, &before[0]));
  EXPECT_OK(spw_trainer_train(trainer, 1));
  EXPECT_OK(spw_trainer_loss(trainer, &before[1]));
  EXPECT(spw_trainer_load_checkpoint(NULL, path), SPW_ERR_NULL_HANDLE, "trainer is NULL");
  EXPECT(spw_trainer_load_checkpoint(trainer, NULL), SPW_ERR_NULL_HANDLE, "path is NULL");
  EXPECT(spw_trainer_load_checkpoint(trainer, "/nonexistent/x.h5"), SPW_ERR_NOT_FOUND, "");
  EXPECT_OK(spw_trainer_load_checkpoint(trainer, path));
  EXPECT_OK(spw_trainer_steps_done(trainer, &steps));
  CHECK(steps == 3);
  EXPECT_OK(spw_trainer_train(trainer, 1));
  EXPECT_OK(spw_trainer_loss(trainer, &after[0]));
  EXPECT_OK(spw_trainer_train(trainer, 1));
  EXPECT_OK(spw_trainer_loss(trainer, &after[1]));
  CHECK(after[0] == before[0] && after[1] == before[1]);

  /* Another model's checkpoint is refused before anything changes, also where no tensor's
   * shape tells (heads): the checkpoint's record of its model does. */
  refused_checkpoint(session, path, "model.d_model", "16",
                     "model.d_model = 32 there, 16 in the job");
  refused_checkpoint(session, path, "model.heads", "4",
                     "holds another model than the job's: model.heads = 2 there, 4 in the job");

  stop_requests(trainer);

  /* A freed trainer. */
  EXPECT_OK(spw_trainer_free(trainer));
  EXPECT(spw_trainer_stop_signal(trainer, &signal_number), SPW_ERR_BAD_STATE, "not a live");
  EXPECT(spw_trainer_train(trainer, 1), SPW_ERR_BAD_STATE, "trainer is not a live spw_trainer");
  EXPECT(spw_trainer_loss(trainer, &loss), SPW_ERR_BAD_STATE, "not a live spw_trainer");
  EXPECT(spw_trainer_throughput(trainer, &per_second), SPW_ERR_BAD_STATE, "not a live");
  EXPECT(spw_trainer_steps_done(trainer, &steps), SPW_ERR_BAD_STATE, "not a live");
  EXPECT(spw_trainer_peak_memory(trainer, &peak), SPW_ERR_BAD_STATE, "not a live");
  EXPECT(spw_trainer_describe_plan(trainer, plan, sizeof plan, NULL), SPW_ERR_BAD_STATE,
         "not a live");
  EXPECT(spw_trainer_save_checkpoint(trainer, path), SPW_ERR_BAD_STATE, "not a live");
  EXPECT(spw_trainer_load_checkpoint(trainer, path), SPW_ERR_BAD_STATE, "not a live");
  EXPECT(spw_trainer_free(trainer), SPW_ERR_BAD_STATE, "spw_trainer_free: trainer is not a live");
  EXPECT_OK(spw_trainer_free(NULL));
}

/* stages = "auto" through the ABI: the planner's reasons come with the plan, and its
 * measurements are kept in output.dir. Two ranks, so that there is something to plan. */
static void automatic_plan(spw_session session, const char* scratch) {
  spw_trainer trainer = NULL;
  spw_job job = tiny_job("auto");
  char dir[512], profile[600], plan[4096];
  size_t needed = 0;

  snprintf(dir, sizeof dir, "%s/auto", scratch);
  EXPECT_OK(spw_job_set(job, "output.dir", dir));
  EXPECT_OK(spw_trainer_create(session, job, &trainer));
  EXPECT_OK(spw_trainer_describe_plan(trainer, NULL, 0, &needed));
  CHECK(needed < sizeof plan);
  EXPECT_OK(spw_trainer_describe_plan(trainer, plan, sizeof plan, NULL));
  CHECK(strchr(plan, '\n') != NULL);  /* the layout, then the planner's explanation */
  snprintf(profile, sizeof profile, "%s/profile.json", dir);
  CHECK(rank != 0 || file_exists(profile));
  EXPECT_OK(spw_trainer_train(trainer, 2));
  EXPECT_OK(spw_trainer_free(trainer));
  EXPECT_OK(spw_job_free(job));
}

/* One rank: a step that fails (memory cap) leaves the trainer unusable but freeable. With
 * peers, the failing rank would leave them waiting, which is the caller's to end. */
static void failed_trainer(spw_session session) {
  spw_trainer trainer = NULL;
  spw_job job = NULL;
  double loss = 0;
  int64_t steps = 0;

  EXPECT_OK(spw_job_create_from_string(tiny_gpt, &job));
  EXPECT_OK(spw_job_set(job, "train.batch", "256"));
  EXPECT_OK(spw_job_set(job, "train.microbatches", "1"));
  EXPECT_OK(spw_job_set(job, "memory.cap", "\"2 MiB\""));
  /* Explicit: with "auto" the planner would choose microbatches that fit the cap. */
  EXPECT_OK(spw_job_set(job, "parallel.stages", "1"));
  EXPECT_OK(spw_trainer_create(session, job, &trainer));
  EXPECT(spw_trainer_train(trainer, 1), SPW_ERR_MEMORY_CAP, "spw_trainer_train: step 1");
  EXPECT(spw_trainer_train(trainer, 1), SPW_ERR_BAD_STATE,
         "an earlier call failed on this trainer");
  EXPECT(spw_trainer_loss(trainer, &loss), SPW_ERR_BAD_STATE, "an earlier call failed");
  EXPECT(spw_trainer_steps_done(trainer, &steps), SPW_ERR_BAD_STATE, "an earlier call failed");
  EXPECT(spw_trainer_save_checkpoint(trainer, "x.h5"), SPW_ERR_BAD_STATE, "an earlier call");
  EXPECT_OK(spw_trainer_free(trainer));
  EXPECT_OK(spw_job_free(job));
}

int main(int argc, char** argv) {
  int provided = 0, total_failures = 0;
  spw_session session = NULL, left_open = NULL;
  const char* scratch = argc > 1 ? argv[1] : ".";

  before_mpi();
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  sessions();
  jobs(scratch);
  EXPECT_OK(spw_session_create(MPI_COMM_WORLD, &session));
  trainer_setup_errors(session, scratch);
  training(session, scratch);
  if (size > 1) automatic_plan(session, scratch);
  if (size == 1) failed_trainer(session);
  EXPECT_OK(spw_session_free(session));

  /* After MPI_Finalize: no new session, and one left open cannot free its communicator. */
  EXPECT_OK(spw_session_create(MPI_COMM_WORLD, &left_open));
  MPI_Allreduce(&failures, &total_failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
  EXPECT(spw_session_create(MPI_COMM_WORLD, &session), SPW_ERR_BAD_STATE,
         "MPI is already finalized");
  EXPECT(spw_session_free(left_open), SPW_ERR_BAD_STATE, "MPI was finalized before");
  EXPECT(spw_session_free(left_open), SPW_ERR_BAD_STATE, "not a live spw_session");

  printf("rank %d: %d checks, %d failed\n", rank, checks, failures);
  return failures == 0 && total_failures == 0 ? 0 : 1;
}
