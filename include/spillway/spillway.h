/* spillway.h: the C ABI of spillway, a runtime that trains large neural networks as
 * synchronous pipelines over MPI ranks.
 *
 * C99. Every object is an opaque handle, every function returns an spw_status, and no
 * function throws, exits, aborts, or initialises or finalises MPI. The typical program:
 *
 *   MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
 *   spw_session session;  spw_job job;  spw_trainer trainer;  double loss;
 *   spw_session_create(MPI_COMM_WORLD, &session);
 *   spw_job_create_from_file("gpt.toml", &job);
 *   spw_job_set(job, "train.lr", "3e-4");
 *   spw_trainer_create(session, job, &trainer);   (collective)
 *   spw_trainer_train(trainer, 10);               (collective)
 *   spw_trainer_loss(trainer, &loss);
 *   spw_trainer_free(trainer);  spw_job_free(job);  spw_session_free(session);
 *   MPI_Finalize();
 *
 * Errors. A function that fails returns a code other than SPW_OK and leaves a one-line
 * message naming the function, what is wrong and how to fix it in spw_last_error(). Unless
 * a function's documentation says otherwise, a failed call changes nothing: its output
 * arguments are untouched and its handles are as they were.
 *
 * Handles. A handle is valid from the create call that returned it until its free call.
 * Passing NULL where a handle is expected returns SPW_ERR_NULL_HANDLE. Passing a freed
 * handle, a handle of another type (cast), or any other pointer returns SPW_ERR_BAD_STATE
 * where detectable: the library looks every handle up in a registry of live handles before
 * touching it, so a freed handle is recognised unless a handle of the same type created
 * later happens to reuse its address.
 *
 * Threads. Handles are not locked: use each session (and its jobs and trainers) from one
 * thread at a time. Error messages are per thread. The library calls MPI only from the
 * thread that called it, so any MPI thread level works if the caller keeps that level's
 * rules; MPI_THREAD_MULTIPLE is recommended when other threads use MPI meanwhile.
 *
 * Collective calls (marked "Collective") must be made by every rank of the session's
 * communicator in the same order with the same arguments, like MPI collectives.
 */
#ifndef SPILLWAY_SPILLWAY_H
#define SPILLWAY_SPILLWAY_H

/* Open MPI's and MPICH's mpi.h pull in the C++ bindings (removed in MPI-3) when compiled as
 * C++, and those need libmpi_cxx at link time; spillway.h needs only the C API. */
#if defined(__cplusplus) && !defined(OMPI_SKIP_MPICXX)
#define OMPI_SKIP_MPICXX 1
#endif
#if defined(__cplusplus) && !defined(MPICH_SKIP_MPICXX)
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#if defined(SPW_BUILDING_LIBRARY)
#define SPW_API __attribute__((visibility("default")))
#else
#define SPW_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header; spw_get_version() gives the library's. */
#define SPW_VERSION_MAJOR 0
#define SPW_VERSION_MINOR 1
#define SPW_VERSION_PATCH 0

/* The result of every function. Codes 1-10 are the runtime's own failures; 11 and 12 are
 * misuse of the ABI. The values are fixed: new codes are only ever appended. */
typedef enum spw_status {
  SPW_OK = 0,
  SPW_ERR_INVALID_ARGUMENT = 1, /* a value out of range, or a buffer too small */
  SPW_ERR_SHAPE_MISMATCH = 2,   /* tensors (e.g. in a checkpoint) that do not fit the model */
  SPW_ERR_OUT_OF_MEMORY = 3,    /* the operating system refused an allocation, or the
                                   node's memory (spw_session_create) would be exceeded */
  SPW_ERR_MEMORY_CAP = 4,       /* the rank's memory.cap would be exceeded */
  SPW_ERR_IO = 5,               /* a file could not be read or written */
  SPW_ERR_NOT_FOUND = 6,        /* a file, key or dataset that does not exist */
  SPW_ERR_UNSUPPORTED = 7,      /* something this build or this version cannot do yet */
  SPW_ERR_CONFIG = 8,           /* a malformed job: TOML syntax, unknown key, bad value */
  SPW_ERR_COMMUNICATION = 9,    /* MPI or another rank failed */
  SPW_ERR_INTERNAL = 10,        /* a broken invariant inside spillway: a bug, please report */
  SPW_ERR_NULL_HANDLE = 11,     /* a NULL handle, or a NULL pointer for a result */
  SPW_ERR_BAD_STATE = 12        /* a freed handle, or a call out of order */
} spw_status;

typedef struct spw_session_s* spw_session; /* the caller's communicator, duplicated */
typedef struct spw_job_s* spw_job;         /* a job description: model, data, training */
typedef struct spw_trainer_s* spw_trainer; /* a job running on a session's ranks */

/* ---- Status, errors, version ------------------------------------------------------- */

/* A static description of `status` ("invalid argument"); "unknown status" for a value that
 * is not an spw_status. Never NULL; does not touch spw_last_error(). */
SPW_API const char* spw_status_string(spw_status status);

/* The message of the latest call on this thread that failed, "" after a call that
 * succeeded (every function but spw_status_string and spw_last_error resets it). Never
 * NULL; valid until the thread's next spw_ call. */
SPW_API const char* spw_last_error(void);

/* The library's version, which may differ from SPW_VERSION_* of the header a program was
 * compiled with. Returns SPW_ERR_NULL_HANDLE if any pointer is NULL (nothing written). */
SPW_API spw_status spw_get_version(int* major, int* minor, int* patch);

/* ---- Sessions ---------------------------------------------------------------------- */

/* Collective over `comm`. Creates a session on a duplicate of `comm` (MPI_Comm_dup), so
 * spillway's messages never mix with the caller's; the duplicate returns MPI errors to
 * spillway instead of aborting (MPI_ERRORS_RETURN). The caller keeps `comm`.
 * The session's ranks on one node share a budget of that node's memory, as `spillway
 * train`'s do: what the node had available when the session was created (MemAvailable and
 * free swap, less a memory cgroup's limit such as Slurm's), less a sixteenth and 256 MiB a
 * rank for what spillway does not count. spillway's tensors are counted against it, so a
 * model too big for the node fails with SPW_ERR_OUT_OF_MEMORY and a message naming what it
 * needs and the budget, instead of the kernel ending the process; memory the host takes
 * after this call is not seen. The first live session of a process sets the budget; one
 * created while it lives shares it, and none is set where the figures cannot be read.
 *   SPW_ERR_NULL_HANDLE       session is NULL
 *   SPW_ERR_BAD_STATE         MPI is not initialised, or already finalised: call
 *                             MPI_Init_thread first (spillway never initialises MPI)
 *   SPW_ERR_INVALID_ARGUMENT  comm is MPI_COMM_NULL or an inter-communicator
 *   SPW_ERR_COMMUNICATION     MPI_Comm_dup, or sharing the node's budget, failed
 * On failure *session is untouched and no communicator or budget is left behind. A value that is
 * not a communicator at all is MPI's to judge: under MPI's default error handler it ends the job.
 */
SPW_API spw_status spw_session_create(MPI_Comm comm, spw_session* session);

/* spw_session_create for a Fortran communicator handle (converted with MPI_Comm_f2c). The
 * same codes; a handle that does not convert is SPW_ERR_INVALID_ARGUMENT. */
SPW_API spw_status spw_session_create_f(MPI_Fint comm, spw_session* session);

/* This rank's index in the session's communicator, and the communicator's size.
 *   SPW_ERR_NULL_HANDLE  session or the result pointer is NULL
 *   SPW_ERR_BAD_STATE    session was freed */
SPW_API spw_status spw_session_rank(spw_session session, int* rank);
SPW_API spw_status spw_session_size(spw_session session, int* size);

/* Collective over the session's communicator. Frees the duplicate communicator and the
 * session. Free every trainer of the session first, and free the session before
 * MPI_Finalize. NULL is allowed and does nothing (SPW_OK).
 *   SPW_ERR_BAD_STATE  session was freed already, or trainers of the session are still
 *                      live (the session is then left as it was); or MPI was finalised
 *                      first (the session's memory is released but its communicator
 *                      cannot be: the handle is gone either way) */
SPW_API spw_status spw_session_free(spw_session session);

/* ---- Jobs -------------------------------------------------------------------------- */
/* A job holds what a job file holds (runtime/job_config.hpp lists every key and default):
 * a TOML text plus settings applied on top of it in call order, like `spillway train
 * --set`. Jobs are local (not collective) and need no MPI. Values are range-checked as a
 * whole job by spw_job_check and spw_trainer_create; spw_job_set checks only the key and
 * the value's TOML syntax, since a job is often inconsistent half-way through being set.
 * spw_trainer_train says how many steps to run, so a job may leave out train.steps and
 * train.epochs (the CLI needs one of them); it is then checked as if train.steps = 1, and a
 * learning-rate decay (train.lr_decay) must say where it ends (train.decay_steps).
 *
 * A model can also be built by calls instead of model.* keys:
 *   MLP: spw_job_set_input(job, 784); spw_job_add_dense(job, 1024); spw_job_add_dense(job, 10);
 *        -> model.kind = "mlp", model.dims = [784, 1024, 10]
 *   GPT: spw_job_set(job, "model.d_model", "128") (and heads, seq), then
 *        spw_job_add_transformer_blocks(job, 4) -> model.kind = "gpt", model.layers = 4
 * Once one of these calls is made they own model.kind and model.layers or model.dims,
 * replacing whatever the TOML text says; setting those keys with spw_job_set then returns
 * SPW_ERR_BAD_STATE, and so does a block call after spw_job_set set one of them. */

/* An empty job: every key at its default (a GPT on the text corpus).
 *   SPW_ERR_NULL_HANDLE  job is NULL */
SPW_API spw_status spw_job_create(spw_job* job);

/* A job from a TOML file, read and checked now; messages name the file and line.
 *   SPW_ERR_NULL_HANDLE  path or job is NULL
 *   SPW_ERR_NOT_FOUND    the file does not exist
 *   SPW_ERR_IO           it cannot be read
 *   SPW_ERR_CONFIG       it is not a valid job
 * On failure *job is untouched. */
SPW_API spw_status spw_job_create_from_file(const char* path, spw_job* job);

/* A job from TOML text, checked now; messages call it "job string".
 *   SPW_ERR_NULL_HANDLE  toml or job is NULL
 *   SPW_ERR_CONFIG       the text is not a valid job */
SPW_API spw_status spw_job_create_from_string(const char* toml, spw_job* job);

/* Sets `key` ("section.key", e.g. "train.lr") to `value`, written as TOML: "0.01", "true",
 * "[[0, 3], [4, 7]]", "\"auto\"" (a bare word that is not TOML, like auto, is taken as a
 * string). A later call for the same key replaces the earlier one.
 *   SPW_ERR_NULL_HANDLE  job, key or value is NULL
 *   SPW_ERR_BAD_STATE    job was freed; or key is model.kind, model.layers or model.dims
 *                        and the model was built by calls
 *   SPW_ERR_CONFIG       not section.key, an unknown key, or a value that is not TOML */
SPW_API spw_status spw_job_set(spw_job job, const char* key, const char* value);

/* The MLP's input width: the first entry of model.dims. Call once, before
 * spw_job_add_dense.
 *   SPW_ERR_NULL_HANDLE       job is NULL
 *   SPW_ERR_INVALID_ARGUMENT  width < 1
 *   SPW_ERR_BAD_STATE         job was freed; the input is set already; the model was built
 *                             as a GPT by calls; or spw_job_set set model.kind or model.dims */
SPW_API spw_status spw_job_set_input(spw_job job, int width);

/* Appends a dense layer of `width` outputs to the MLP; the last one added is the output
 * layer (its width is the number of classes).
 *   SPW_ERR_NULL_HANDLE       job is NULL
 *   SPW_ERR_INVALID_ARGUMENT  width < 1
 *   SPW_ERR_BAD_STATE         job was freed, or spw_job_set_input has not been called */
SPW_API spw_status spw_job_add_dense(spw_job job, int width);

/* Appends `count` transformer blocks to the GPT (model.layers grows by count). Width, heads
 * and sequence length are model.d_model, model.heads and model.seq (spw_job_set).
 *   SPW_ERR_NULL_HANDLE       job is NULL
 *   SPW_ERR_INVALID_ARGUMENT  count < 1
 *   SPW_ERR_BAD_STATE         job was freed; the model was built as an MLP by calls; or
 *                             spw_job_set set model.kind or model.layers */
SPW_API spw_status spw_job_add_transformer_blocks(spw_job job, int count);

/* Checks the whole job now, as spw_trainer_create will, without MPI: every key's type and
 * range and their combinations. (Whether the data and files exist is checked by
 * spw_trainer_create.)
 *   SPW_ERR_NULL_HANDLE  job is NULL
 *   SPW_ERR_BAD_STATE    job was freed, or spw_job_set_input without spw_job_add_dense
 *   SPW_ERR_CONFIG       the job is not valid; the message names the setting or line */
SPW_API spw_status spw_job_check(spw_job job);

/* Frees the job. Trainers created from it keep their own copy. NULL does nothing (SPW_OK).
 *   SPW_ERR_BAD_STATE  job was freed already */
SPW_API spw_status spw_job_free(spw_job job);

/* ---- Trainers ---------------------------------------------------------------------- */
/* A trainer runs one job as a synchronous pipeline over the session's ranks, exactly as
 * `spillway train` lays it out: parallel.stages as a count or block ranges, or "auto" (the
 * default) to let the planner choose stages, replicas, chunks, microbatches and schedule
 * from a profile of the model and measured links (rank 0 creates output.dir and caches
 * them there; this profiles the model, even on one rank, so explicit stages start faster).
 * Activation stashes go to the job's [offload] tier. Training, loss and memory figures
 * match the CLI's for the same job. The library writes nothing to stdout.
 *
 * After a collective call fails, the trainer is unusable: every later call on it returns
 * SPW_ERR_BAD_STATE except spw_trainer_free. Errors while setting up (spw_trainer_create)
 * are agreed: every rank returns the same code. Errors during training
 * (spw_trainer_train, checkpoints) may be one rank's alone while its peers wait for it in
 * MPI; the caller should then end the job (MPI_Abort), as `spillway train` does. */

/* Collective. Checks the job on every rank, sets this rank's OpenMP threads (threads.count,
 * else OMP_NUM_THREADS, split among the ranks of a node; threads are bound unless
 * OMP_PROC_BIND or OMP_PLACES say otherwise), chooses BLIS's kernels unless BLIS started
 * before (the caller's BLIS_ARCH_TYPE; else, where this BLIS would fall back to its generic
 * kernels on a CPU it does not know, the vector ones the CPU runs, by setting
 * BLIS_ARCH_TYPE in the process environment), sets this process's memory cap
 * (memory.cap), plans and builds this rank's part of the model with its optimizer and data.
 * train.steps and train.epochs are not used: spw_trainer_train says how many steps to run;
 * nor is eval.every: spw_trainer_evaluate evaluates when called (with eval.every > 0 the
 * held-out data is opened here, so a data.holdout too small fails now).
 *   SPW_ERR_NULL_HANDLE       session, job or trainer is NULL
 *   SPW_ERR_BAD_STATE         session or job was freed, or the job's model was begun by
 *                             calls and not finished (spw_job_set_input alone)
 *   SPW_ERR_CONFIG            the job is not valid, or BLIS_ARCH_TYPE names kernels this
 *                             BLIS lacks or this CPU cannot run
 *   SPW_ERR_INVALID_ARGUMENT  the layout does not fit the ranks, the model or the batch
 *                             (e.g. parallel.stages = 3 on 2 ranks)
 *   SPW_ERR_UNSUPPORTED       output.checkpoint_every > 0 (the ABI writes checkpoints when
 *                             told: spw_trainer_save_checkpoint), or a schedule or tier
 *                             this build or machine cannot run
 *   SPW_ERR_NOT_FOUND, SPW_ERR_IO  the data or train.init_from cannot be read
 *   SPW_ERR_MEMORY_CAP, SPW_ERR_OUT_OF_MEMORY, SPW_ERR_COMMUNICATION
 * On failure *trainer is untouched, on every rank alike, and nothing needs freeing. */
SPW_API spw_status spw_trainer_create(spw_session session, spw_job job, spw_trainer* trainer);

/* The layout that runs, as one or more lines of text: "2 stages x 1 replica, 1f1b, 4
 * microbatches of 2", then the planner's reasons when it chose the layout. Writes the
 * text and its terminating NUL into buffer[0..size). Pass buffer = NULL and size = 0 to
 * ask for the size only. `needed` (may be NULL) receives the bytes the text needs,
 * terminating NUL included, on success and on SPW_ERR_INVALID_ARGUMENT.
 *   SPW_ERR_NULL_HANDLE       trainer is NULL, or buffer = NULL and size = 0 and
 *                             needed = NULL (nothing to answer into)
 *   SPW_ERR_INVALID_ARGUMENT  size is smaller than needed (buffer[0] is set to NUL when
 *                             size > 0), or buffer = NULL with size > 0
 *   SPW_ERR_BAD_STATE         trainer was freed, or failed earlier */
SPW_API spw_status spw_trainer_describe_plan(spw_trainer trainer, char* buffer, size_t size,
                                             size_t* needed);

/* Collective. Runs `steps` training steps, fewer when a stop request (spw_request_stop)
 * ends it early: see spw_trainer_stop_signal. Every rank must pass the same count; the
 * ranks compare them first.
 *   SPW_ERR_NULL_HANDLE       trainer is NULL
 *   SPW_ERR_INVALID_ARGUMENT  steps < 1, or the ranks passed different counts (on every
 *                             rank; the trainer stays usable)
 *   SPW_ERR_BAD_STATE         trainer was freed, or failed earlier
 *   other codes               a step failed (e.g. SPW_ERR_MEMORY_CAP): the message names
 *                             the step and instruction. The steps before it count, and
 *                             the trainer is now unusable (see above). */
SPW_API spw_status spw_trainer_train(spw_trainer trainer, int64_t steps);

/* Collective. The mean loss of `batches` batches of held-out data, each of train.batch
 * samples run as a training batch is but through the forwards alone, the same batches at
 * every call: the end of a text corpus or token file that data.holdout keeps out of
 * training, Fashion-MNIST's t10k set, or for synthetic data samples no training step
 * draws. Nothing the training reads changes: the steps after it run as they would have
 * without it. Every rank must pass the same count; *loss is the same on every rank.
 *   SPW_ERR_NULL_HANDLE       trainer or loss is NULL
 *   SPW_ERR_INVALID_ARGUMENT  batches < 1, the ranks passed different counts, or the job's
 *                             text or token file has no held-out part (data.holdout = 0),
 *                             or one too short for a sequence (on every rank; the trainer
 *                             stays usable)
 *   SPW_ERR_NOT_FOUND, SPW_ERR_IO  the held-out data cannot be read (on every rank; the
 *                             trainer stays usable)
 *   SPW_ERR_BAD_STATE         trainer was freed, or failed earlier
 *   other codes               the pass failed (e.g. SPW_ERR_MEMORY_CAP): the trainer is
 *                             now unusable (see above)
 * On failure *loss is untouched. */
SPW_API spw_status spw_trainer_evaluate(spw_trainer trainer, int batches, double* loss);

/* Steps run so far (including those a loaded checkpoint had run).
 *   SPW_ERR_NULL_HANDLE  trainer or steps is NULL
 *   SPW_ERR_BAD_STATE    trainer was freed, or failed earlier */
SPW_API spw_status spw_trainer_steps_done(spw_trainer trainer, int64_t* steps);

/* The mean loss over the batch of the latest step, the same on every rank.
 *   SPW_ERR_NULL_HANDLE  trainer or loss is NULL
 *   SPW_ERR_BAD_STATE    trainer was freed or failed earlier, or no step has run since it
 *                        was created */
SPW_API spw_status spw_trainer_loss(spw_trainer trainer, double* loss);

/* The median throughput over the steps this trainer ran, the first (warm-up) step left out
 * when there are others: tokens/s for a GPT, samples/s for an MLP, for the whole batch.
 *   SPW_ERR_NULL_HANDLE  trainer or per_second is NULL
 *   SPW_ERR_BAD_STATE    trainer was freed or failed earlier, or no step has run since it
 *                        was created */
SPW_API spw_status spw_trainer_throughput(spw_trainer trainer, double* per_second);

/* The highest number of bytes this rank (process) has held at once, as spillway's memory
 * ledger counts them (parameters, gradients, optimizer state, activations, workspace),
 * since the process started. Differs between ranks; not collective.
 *   SPW_ERR_NULL_HANDLE  trainer or bytes is NULL
 *   SPW_ERR_BAD_STATE    trainer was freed, or failed earlier */
SPW_API spw_status spw_trainer_peak_memory(spw_trainer trainer, uint64_t* bytes);

/* Collective. Writes the whole model, the optimizer's state and the step count to the
 * HDF5 file `path`, with the job's resolved configuration: PyTorch state_dict names, the
 * same layout as `spillway train` checkpoints and whatever the stage split, so either can
 * resume from it. The ranks of the first replica write their own tensors into the file,
 * so they must all see `path` (a shared file system on several nodes). The file appears
 * whole or not at all.
 *   SPW_ERR_NULL_HANDLE    trainer or path is NULL
 *   SPW_ERR_BAD_STATE      trainer was freed, or failed earlier
 *   SPW_ERR_IO             the file cannot be written
 *   SPW_ERR_COMMUNICATION  MPI failed: the trainer is now unusable
 * Every rank returns the same code; except after SPW_ERR_COMMUNICATION the trainer is
 * unchanged and usable, and no file (nor a temporary) is left. */
SPW_API spw_status spw_trainer_save_checkpoint(spw_trainer trainer, const char* path);

/* Collective. Continues from a checkpoint of the same model (from
 * spw_trainer_save_checkpoint or `spillway train`, any stage split): parameters,
 * optimizer state and step count. Every rank checks its tensors before any rank loads.
 *   SPW_ERR_NULL_HANDLE       trainer or path is NULL
 *   SPW_ERR_BAD_STATE         trainer was freed, or failed earlier
 *   SPW_ERR_NOT_FOUND         no such file, or a tensor the model needs is missing
 *   SPW_ERR_SHAPE_MISMATCH    a tensor has another shape, or the file records another
 *                             model (a [model] key that changes what it computes, such as
 *                             layers or heads, differs from the job's)
 *   SPW_ERR_INVALID_ARGUMENT  the file is not a spillway checkpoint of a usable step
 *   SPW_ERR_IO, SPW_ERR_COMMUNICATION  reading failed, possibly half-way through
 * Every rank returns the same code. After the first three the trainer is unchanged and
 * usable; after any other failure it is unusable. */
SPW_API spw_status spw_trainer_load_checkpoint(spw_trainer trainer, const char* path);

/* ---- stopping early --------------------------------------------------------------------
 * A batch system signals a job before it kills it (Slurm: --signal=USR1@120, or SIGTERM
 * KillWait seconds ahead). A host that turns that signal into a stop request gets
 * spw_trainer_train back after the step in progress, on every rank after the same step, and
 * can save a checkpoint and exit:
 *   spw_catch_stop_signals();                      (or its own handler: spw_request_stop)
 *   spw_trainer_train(trainer, 1000);
 *   spw_trainer_stop_signal(trainer, &signal_number);
 *   if (signal_number != 0) { spw_trainer_save_checkpoint(trainer, "stopped.h5"); ... } */

/* Asks spw_trainer_train to stop after the step in progress (or the next call to stop after
 * its first step). Any rank may ask; the ranks agree at each step's end. Async-signal-safe:
 * a signal handler may call it. signal_number says why (spw_trainer_stop_signal returns
 * it); values <= 0 are ignored. Sets no error message and cannot fail. */
SPW_API void spw_request_stop(int signal_number);

/* Installs handlers for SIGUSR1 and SIGTERM that call spw_request_stop with the signal's
 * number, each for one delivery: the same signal again does what it did before (ends the
 * process, unless the host had its own handler). spillway installs no handler otherwise.
 *   SPW_ERR_IO  sigaction refused (the message names the signal); handlers installed
 *               before it stay */
SPW_API spw_status spw_catch_stop_signals(void);

/* The signal of the stop request that ended the latest spw_trainer_train, on every rank
 * alike (the largest when ranks were asked for different ones); 0 when that call ran all
 * its steps with no request. A request that comes during a call's last step is reported
 * by that call. spw_trainer_train takes the request: the next call runs unless asked again.
 *   SPW_ERR_NULL_HANDLE  trainer or signal_number is NULL
 *   SPW_ERR_BAD_STATE    trainer was freed, or failed earlier */
SPW_API spw_status spw_trainer_stop_signal(spw_trainer trainer, int* signal_number);

/* Frees the trainer, also after a failed call. In MPI's terms this is collective (it frees
 * the trainer's communicators), but MPI_Comm_free completes without waiting for peers, so
 * a rank can free its trainer after a failure before it ends the job. NULL does nothing
 * (SPW_OK).
 *   SPW_ERR_BAD_STATE  trainer was freed already */
SPW_API spw_status spw_trainer_free(spw_trainer trainer);

#ifdef __cplusplus
}
#endif

#endif /* SPILLWAY_SPILLWAY_H */
