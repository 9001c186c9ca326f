// The MPI pipeline executor: each rank interprets its instruction list from partition/ one
// instruction at a time. It knows nothing about any particular schedule; GPipe, 1F1B,
// interleaved and zero-bubble differ only in the lists their generators write.
//
// Per rank it owns the parameters, gradients and optimizer state of its chunks (one chunk
// per global stage it holds), and per (chunk, microbatch) in flight a slot with the chunk's
// input, every block's output and saved state, and the gradients flowing back. A slot is
// taken at the first instruction that needs it (often a receive posted early) and returned
// once its weight gradient is done and its sends have completed; slots are reused, so a
// steady-state step allocates nothing. With offload a slot of a chunk whose stashes the
// list offloads gives its memory back as soon as its stash is out or its backward is done,
// to a spare slot of its chunk whose memory the next forward, prefetch or backward takes
// instead of mapping new pages (before_mapping says when parked memory is freed instead).
//
// Communication: activations and gradients move with MPI_Isend / MPI_Irecv on a pipeline
// communicator (one per replica). Receives are posted `receive_lookahead` receive
// instructions ahead of the one being waited on, so data lands while the rank computes.
// Sends are never waited on inside the step, matching the validator's assumption that
// sends do not block. ReduceGrads(c) starts a non-blocking all-reduce of chunk c's
// gradients on the data-parallel communicator of the rank's pipeline position; the
// executor tests it between instructions so it progresses, and OptimizerStep waits for it.
//
// PipeFB (a placed schedule): a chunk may run only the forwards of its stage (it then holds
// parameters but no gradients or optimizer state) or only the backwards. SendStash ships the
// slot's stash tensors (every block's input and saved state) to the backward rank, which
// receives them into a slot laid out like the forward's; after its OptimizerStep the
// backward rank sends the chunk's parameters back, and the forward rank's last instruction,
// RecvParams, receives them in place (never posted early: the forwards read those tensors).
//
// The members are defined in three files: pipeline_executor.cpp (setup, compute, the step),
// pipeline_executor_slots.cpp (slots, stashes, offload) and pipeline_executor_comm.cpp (MPI).
#pragma once

#include <mpi.h>

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/status.hpp"
#include "offload/engine.hpp"
#include "partition/schedule.hpp"
#include "runtime/engine_binding.hpp"
#include "runtime/batch_source.hpp"
#include "runtime/model.hpp"
#include "runtime/optimizer.hpp"
#include "runtime/pipeline_layout.hpp"
#include "runtime/trace.hpp"
#include "runtime/trainer.hpp"

namespace spw {

struct PipelineSettings {
  TrainSettings train;  // train.microbatches counts the whole batch's microbatches
  PipelineLayout layout;
  OffloadConfig offload;  // tier none: stashes stay resident
  EngineBinding engine;   // where the offload engine's thread runs (open_pipeline_job sets it)
  int receive_lookahead = 4;
  // Steps [trace_first_step, trace_first_step + trace_steps) record trace events (1-based).
  int trace_first_step = 1;
  int trace_steps = 0;
};

// What one rank measured in one step.
struct RankStepMetrics {
  double busy_s = 0;       // running F, B, W and OptimizerStep
  double span_s = 0;       // from the step's start to the end of the rank's list
  double recv_wait_s = 0;  // blocked in receives
  double optimizer_s = 0;  // the OptimizerStep, including its wait for the all-reduce
  double offload_wait_s = 0;  // blocked until a stash was back from the capacity tier
  std::int64_t sent_bytes = 0;  // activations, gradients, stashes and parameters sent
  std::int64_t allocated_bytes = 0;  // memory the rank's ledger reserved anew in the step
};

// What the offload engine did on this rank over the whole run.
struct OffloadTotals {
  std::string tier;  // empty: no offload
  offload::EngineStats engine;
  std::int64_t failed_evictions = 0;  // stashes that stayed resident because a copy failed
  std::string first_failed_eviction;  // the first such copy's error (empty: none failed)
  int engine_pu = -1;                 // the PU its thread is bound to, -1: unbound
  bool engine_shares_core = false;    // it can run on a core a compute thread runs on
  std::string engine_binding;         // why it runs there (EngineBinding::why, or the failure)
  std::vector<offload::EngineTransfer> transfers;  // the engine's newest successful copies
};

// Seconds this rank's chunks spent per microbatch, summed over the steps after the first
// (or over the first when there was only one), with how many went in.
struct ChunkTiming {
  double forward_s = 0;
  double backward_input_s = 0;
  double backward_weight_s = 0;
  double reduce_s = 0;  // per step, issue to completion
  std::int64_t forward_samples = 0;   // microbatches in forward_s
  std::int64_t samples = 0;           // microbatches in the backward sums
  std::int64_t reduce_samples = 0;
};

class PipelineExecutor {
 public:
  // Collective over `world`, whose size must be settings.layout.world_size(). Builds this
  // rank's chunks with the same initial values the single-rank trainer uses, its optimizer
  // and data. Every rank returns the same error when any rank fails.
  static Result<std::unique_ptr<PipelineExecutor>> create(const PipelineSettings& settings,
                                                          MPI_Comm world);
  ~PipelineExecutor();
  PipelineExecutor(const PipelineExecutor&) = delete;
  PipelineExecutor& operator=(const PipelineExecutor&) = delete;

  // With settings.train.inference_only every rank holds its chunks' parameters alone (no
  // gradients or optimizer state) and runs evaluations and next_token_logits; run_step
  // returns unsupported on every rank, and no rank owns_parameters().
  //
  // One training step, collective over the world. result.loss is the batch's mean loss on
  // every rank. An error leaves the executor unusable; peers may be blocked on this rank,
  // so the caller must end the job (the CLI aborts it).
  Status run_step(StepResult& result);

  // Collective over the world: the mean loss of `batches` batches of held-out data
  // (open_evaluation_source), each of train.batch samples split as a training batch is,
  // run through the forwards of the training schedule alone (sched::make_evaluation). The
  // parameters, optimizer state and step count stay as they were; the step metrics and
  // timings do not count it. Every rank returns the same loss, or the same error when the
  // data cannot be opened; an error from inside the pass leaves the executor as a failed
  // run_step does.
  Result<double> evaluate(int batches);
  // Collective over the world: the next-token logits (model.vocab floats) after position
  // `last` of `window` (model.seq token ids), on every rank. Every sample of every microbatch
  // gets that window and the forwards of the training schedule run as an evaluation batch
  // does; replica 0's head computes the logits and its rank sends them to the others. A
  // gpt's alone: invalid_argument for another model or a window of another length,
  // unsupported when the head keeps no logits (model.head_chunk_rows > 0). The parameters,
  // the step count and the step metrics stay as they were; an error from inside the pass
  // leaves the executor as a failed run_step does.
  Result<std::vector<float>> next_token_logits(const std::vector<std::int32_t>& window,
                                               std::size_t last);
  // Collective: opens the held-out data now, if it is not open yet (TrainSettings::evaluates
  // opened it at create). Every rank returns the same error, and the executor stays usable.
  Status open_evaluation_data();
  // Collective: invalid_argument, the same on every rank, unless every rank's data has rank
  // 0's digest and size (BatchSource::digest).
  Status check_same_data() const;

  std::int64_t steps_done() const { return step_; }
  // The data it trains and evaluates on (describe_data): the same on every rank.
  std::string data_description() const;
  std::int64_t total_steps() const { return total_steps_; }
  const PipelineSettings& settings() const { return settings_; }
  const PipelineLayout& layout() const { return settings_.layout; }
  const sched::Schedule& schedule() const { return schedule_; }
  int world_rank() const { return world_rank_; }
  int pipeline_rank() const { return pipeline_rank_; }
  int replica() const { return replica_; }
  std::size_t model_parameter_count() const { return model_parameters_; }

  std::vector<NamedParameter> local_parameters();
  // Whether this rank owns its parameters' training state (gradients, optimizer), so that
  // checkpoints and gathers take them from it: every rank but a PipeFB forward rank, whose
  // parameters are a copy of its backward rank's.
  bool owns_parameters() const { return optimizer_ != nullptr; }
  Optimizer& optimizer() { return *optimizer_; }  // only when owns_parameters()
  // For resuming from a checkpoint: the step count the next run_step continues from.
  void set_steps_done(std::int64_t steps) { step_ = steps; }
  const std::vector<TraceEvent>& trace_events() const { return trace_; }
  const std::vector<RankStepMetrics>& step_metrics() const { return metrics_; }
  const std::vector<ChunkTiming>& chunk_timings() const { return timings_; }
  OffloadTotals offload_totals() const;
  // Activation bytes a chunk sends per microbatch (its last block's output).
  std::int64_t activation_bytes(int chunk) const;
  // Bytes one microbatch in flight holds on `chunk`: its input, every block's output and
  // saved state, and the gradients flowing back (the largest slot so far).
  std::int64_t stash_bytes(int chunk) const;
  std::int64_t parameter_bytes(int chunk);
  std::size_t local_chunks() const { return chunks_.size(); }
  double time_origin() const;  // seconds, steady clock; equal instants on every rank

  // Collective: the parameters of `replica`'s ranks, by name, on world rank 0 (empty
  // elsewhere). For tests and checkpoints.
  Result<std::map<std::string, std::vector<float>>> gather_parameters(int replica);

 private:
  struct Slot;
  // Where a stash tensor sits in a slot, and its shape.
  struct StashEntry {
    int block = -1;  // -1: the slot's acts; else that block's saved state
    std::size_t index = 0;
    Shape shape;
  };
  PipelineExecutor() = default;

  // One rank's instruction list for one pass (a training step or an evaluation batch).
  struct Program {
    std::vector<sched::Instruction> list;
    std::vector<std::size_t> receive_positions;  // where the receives sit in list
    // Where the step's loss sum starts (see loss_final_after_ below); unused without sums.
    std::ptrdiff_t loss_final_after = -1;
    bool sums_loss = false;  // a training step sums its loss over the ranks as it goes
  };
  static Program program_for(std::vector<sched::Instruction> list);

  Status setup(const PipelineSettings& settings, MPI_Comm world);
  // Fills the microbatches of this replica's share of batch `step` of `source`, for a training
  // step (`training`: a backward follows each forward) or an evaluation.
  Status load_microbatches(const BatchSource& source, std::int64_t step, bool training);
  // Runs `program` to its end and waits for its sends. Errors name the pass ("step 12"),
  // built only then: a step's path allocates nothing for it.
  Status run_program(const Program& program, const char* pass, std::int64_t number);
  Status execute(const sched::Instruction& in, std::size_t position);
  Status forward(int mb, int chunk);
  // Runs `passes` (evaluations, sampling passes) as no step: the step metrics and timings
  // the report reads stay as they were, and the training list is the one running after.
  Status outside_steps(const std::function<Status()>& passes);
  // Copies row capture_position_ of the head's logits (null: it keeps none) for
  // next_token_logits.
  Status capture_logits(const Tensor* logits);
  Status backward_input(int mb, int chunk);
  Status backward_weight(int mb, int chunk);
  Result<std::int64_t> send(const sched::Instruction& in);  // bytes sent
  Result<std::int64_t> send_stash(const sched::Instruction& in);
  Result<std::int64_t> send_params(const sched::Instruction& in);
  Result<std::vector<Tensor*>> receive_buffers(const sched::Instruction& in);
  Status receive(const sched::Instruction& in, std::size_t position);
  // Zeroes the stale gradients of the chunks this rank runs W for, one tensor at a time until
  // `requests` complete; returns the seconds it spent zeroing.
  Result<double> zero_grads_while_waiting(std::vector<MPI_Request>& requests);
  Result<bool> zero_stale_grads(int chunk, std::vector<MPI_Request>* until_arrived);
  // A block of the chunk adds to its gradients in a training forward (the chunked head), so
  // the step's first forward must find them zeroed.
  bool accumulates_in_forward(int chunk) const;
  Status post_receives_through(std::size_t receive_index, std::size_t needed);
  Status reduce_grads(int chunk);
  Status optimizer_step();
  // Scales the trained gradients to the clip norm (train.clip_grad_norm), collective over
  // clip_comm_.
  Status clip_gradients();
  Status progress();
  Status poke_communication();
  Status finish_sends();
  // Starts the step's loss sum over all ranks with this rank's share (see loss_share_).
  Status start_loss_sum();
  Status setup_offload();
  Result<Slot*> placeholder_forward(int chunk);
  void return_placeholder(int chunk);
  Result<std::int64_t> measure_stash_bytes();
  Status learn_stash_layouts();
  std::vector<StashEntry> stash_entries(const Slot& slot, int chunk) const;
  static Stash& stash_holding(Slot& slot, const StashEntry& entry);
  static std::size_t bytes_of(const std::vector<StashEntry>& entries);
  std::vector<Tensor*> stash_tensors(Slot& slot, int chunk);
  std::uint64_t stash_id(int chunk, int mb) const;
  Status offload(int mb, int chunk);
  Status prefetch(int mb, int chunk);
  void settle_eviction(Slot& slot, int chunk, int mb, bool block);
  Status ensure_resident(Slot& slot, int chunk, int mb);
  Status make_room(std::size_t bytes);
  Result<Slot*> slot(int chunk, int mb);
  Status retire_if_done(int chunk, int mb);
  Status wait_for_stashes_taken(int chunk);
  bool gives_slots_back(int chunk) const;
  void release_if_offloading(Slot& slot, int chunk);
  void release_unsent(Slot& slot, int chunk);
  void drop_spares();
  void settle_finished_evictions(int only_chunk);
  void before_mapping(int chunk, int kind);
  static std::size_t bytes_held(const Slot& slot);
  Status reclaim_retired();
  Result<Tensor*> chunk_input(Slot& slot, int chunk, int mb);
  Result<Tensor*> chunk_output_grad(Slot& slot, int chunk, int mb);
  int tag_of(const sched::Transfer& transfer) const;
  int global_stage(int chunk) const { return chunk_stage_[static_cast<std::size_t>(chunk)]; }
  bool runs_backward(int chunk) const { return chunk_backward_[static_cast<std::size_t>(chunk)]; }
  double now() const;
  void record(TraceTrack track, const sched::Instruction& in, std::int64_t bytes,
              double start, double end);

  PipelineSettings settings_;
  sched::Schedule schedule_;
  std::optional<sched::StageIndex> stages_;  // of schedule_, for the transfers of every step
  Program training_;
  Program evaluation_;
  const Program* program_ = &training_;  // the one running
  MPI_Comm world_ = MPI_COMM_NULL;
  MPI_Comm pipeline_comm_ = MPI_COMM_NULL;
  MPI_Comm replica_comm_ = MPI_COMM_NULL;  // the ranks holding the same stages
  // With gradient clipping: this replica's ranks that run an OptimizerStep, which add up the
  // global norm together.
  MPI_Comm clip_comm_ = MPI_COMM_NULL;
  std::optional<double> grad_norm_;  // this step's, where this rank clipped
  // [trained parameter, in the optimizer's order] its place in the whole model's parameter
  // order, as global stage * 2^20 + its index in its chunk: the order the sums are added in.
  std::vector<double> clip_order_;
  int world_rank_ = 0;
  int pipeline_rank_ = 0;
  int replica_ = 0;
  int tag_limit_ = 32767;

  std::vector<int> chunk_stage_;      // [local chunk] its global stage
  std::vector<bool> chunk_backward_;  // [local chunk] runs its stage's backwards here
  std::vector<std::unique_ptr<Model>> chunks_;
  // [local chunk] every stash entry, in stash_tensors() order: what a backward-only chunk
  // allocates before receiving a stash.
  std::vector<std::vector<StashEntry>> stash_layouts_;
  std::vector<MPI_Request> param_sends_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<BatchSource> data_;
  std::unique_ptr<BatchSource> evaluation_data_;  // opened by the first evaluate()
  bool reads_batches_ = false;
  std::vector<MicrobatchBuffers> buffers_;
  std::vector<MicrobatchData> microbatches_;
  std::vector<double> losses_;
  // While next_token_logits runs: the position whose logits replica 0's head copies into
  // captured_logits_ in its forward of microbatch 0; -1 otherwise.
  std::int64_t capture_position_ = -1;
  std::vector<float> captured_logits_;
  // The step's loss is summed by a non-blocking all-reduce that each rank joins as soon as its
  // share is final: after the last Forward of its loss chunk (Program::loss_final_after, an
  // index into the list), or at the step's start (-1) on ranks without one. A rank that
  // finishes first then waits only for the others' losses, not for their last weight
  // gradients, and starts its next step while they finish theirs.
  double loss_share_ = 0;
  double loss_sum_ = 0;
  MPI_Request loss_request_ = MPI_REQUEST_NULL;
  // [local chunk] how many of its gradients (in Model::parameters() order) hold this step's
  // zeros, kGradsZeroed once all do; the rest still hold the last step's.
  std::vector<std::size_t> grads_zeroed_;
  static constexpr std::size_t kGradsZeroed = static_cast<std::size_t>(-1);
  std::size_t model_parameters_ = 0;

  std::vector<std::vector<std::unique_ptr<Slot>>> slots_;  // [chunk] every slot ever made
  std::vector<std::vector<Slot*>> free_slots_;             // [chunk]
  std::vector<std::vector<Slot*>> active_;                 // [chunk][mb]
  // [chunk] with offload: memory a finished or evicted microbatch leaves for the next one
  // (Stash::recycle_from), at most one slot's worth. Without offload slots keep their own.
  std::vector<std::unique_ptr<Slot>> spares_;
  // Stash memory (forwards, prefetches and receives take it) and gradient buffers (backwards).
  static constexpr int kStashMemory = 0, kGradientBuffers = 1;
  std::vector<std::array<std::vector<Stash*>, 2>> spare_kinds_;  // [chunk][kind] the spare's
  std::vector<std::array<std::function<void()>, 2>> on_miss_;   // [chunk][kind] before_mapping
  std::vector<std::pair<int, Slot*>> retiring_;            // (chunk, slot) with sends in flight

  struct PostedReceive {
    std::vector<MPI_Request> requests;  // one per tensor (a stash or parameters: several)
    std::int64_t bytes = 0;
    double posted_at = 0;
  };
  std::vector<PostedReceive> posted_;  // [receive index] this step
  std::size_t next_to_post_ = 0;
  std::size_t next_to_receive_ = 0;  // the first posted receive not yet waited for

  std::vector<MPI_Request> reduce_requests_;
  std::vector<std::size_t> reduce_events_;  // trace events to close when reduces finish
  std::vector<double> reduce_started_;      // [chunk] issue time this step, -1 if none
  bool reduces_done_ = true;

  std::int64_t step_ = 0;
  std::int64_t total_steps_ = 0;
  bool tracing_ = false;
  // While evaluate() runs batch k (1-based), k: an evaluation right after a traced step is
  // traced with it; else 0.
  int evaluation_batch_ = 0;
  double origin_ = 0;
  double step_start_ = 0;
  RankStepMetrics current_;
  std::vector<RankStepMetrics> metrics_;
  std::vector<ChunkTiming> timings_;
  std::vector<TraceEvent> trace_;

  std::unique_ptr<offload::OffloadEngine> engine_;
  std::vector<bool> chunk_offloads_;  // [chunk] the training list offloads some of its stashes
  std::vector<std::pair<int, int>> evicting_;  // (chunk, mb) whose eviction may be running
  std::int64_t failed_evictions_ = 0;
  std::string first_failed_eviction_;
  std::vector<std::size_t> stash_estimate_;  // [chunk] the most one forward allocated so far
  std::vector<std::size_t> grads_estimate_;  // [chunk] the most one backward's gradients held
  // [chunk] the largest slot seen at retirement: with offload, slots give their memory back,
  // so the slots left at the end of a run no longer show it.
  std::vector<std::size_t> largest_retired_slot_;
};

}  // namespace spw
