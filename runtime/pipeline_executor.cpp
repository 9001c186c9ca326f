// PipelineExecutor: setup, the compute instructions, the interpreter loop and the step.
// Slots, stashes and offload live in pipeline_executor_slots.cpp, MPI transfers and
// collectives in pipeline_executor_comm.cpp.
#include "runtime/pipeline_executor.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>

#include "kernels/memory_ledger.hpp"
#include "partition/generators.hpp"
#include "partition/offload_pass.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/grad_clip.hpp"
#include "runtime/mpi_support.hpp"
#include "runtime/node_memory_budget.hpp"
#include "runtime/parameter_store.hpp"
#include "runtime/pipeline_executor_slot.hpp"

namespace spw {

namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

PipelineExecutor::~PipelineExecutor() {
  MemoryLedger::process().clear_pressure_handler(this);
  // The engine first: its thread may still copy out of slots, and a peer tier frees its
  // window collectively, at the same point on every rank.
  engine_.reset();
  // Requests still open here belong to a failed step; their buffers die with the slots.
  for (MPI_Comm* comm : {&pipeline_comm_, &replica_comm_, &clip_comm_}) {
    if (*comm != MPI_COMM_NULL) MPI_Comm_free(comm);
  }
}

double PipelineExecutor::now() const { return steady_seconds() - origin_; }

double PipelineExecutor::time_origin() const { return origin_; }

Result<std::unique_ptr<PipelineExecutor>> PipelineExecutor::create(
    const PipelineSettings& settings, MPI_Comm world) {
  auto executor = std::unique_ptr<PipelineExecutor>(new PipelineExecutor());
  int size = 0;
  SPW_TRY(mpi_check(MPI_Comm_size(world, &size), "reading the job's size"));
  if (size != settings.layout.world_size()) {
    return error(StatusCode::invalid_argument,
                 "the pipeline layout needs " + std::to_string(settings.layout.world_size()) +
                     " ranks but the communicator has " + std::to_string(size));
  }
  const Status local = executor->setup(settings, world);
  SPW_TRY(agree_on_status(world, local));
  SPW_TRY(executor->check_same_data());
  // The offload tier comes second: the peer tier's window is collective, so every rank
  // must reach it, which a rank whose setup failed would not.
  SPW_TRY(agree_on_status(world, executor->setup_offload()));
  MPI_Barrier(world);
  // Every rank leaves the barrier within microseconds of the others: a common time zero
  // for traces on one node (across nodes, clocks differ by their offset).
  executor->origin_ = steady_seconds();
  return executor;
}

Status PipelineExecutor::setup(const PipelineSettings& settings, MPI_Comm world) {
  settings_ = settings;
  const PipelineLayout& l = settings_.layout;
  world_ = world;
  MPI_Comm_rank(world, &world_rank_);
  pipeline_rank_ = l.pipeline_rank_of(world_rank_);
  replica_ = l.replica_of(world_rank_);
  // Communicator creation is collective: do it before anything that can fail on one rank.
  SPW_TRY(mpi_check(MPI_Comm_split(world, replica_, pipeline_rank_, &pipeline_comm_),
                    "creating the pipeline communicator"));
  SPW_TRY(mpi_check(MPI_Comm_split(world, pipeline_rank_, replica_, &replica_comm_),
                    "creating the data-parallel communicator"));
  MPI_Comm_set_errhandler(pipeline_comm_, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(replica_comm_, MPI_ERRORS_RETURN);
  int* tag_ub = nullptr;
  int found = 0;
  MPI_Comm_get_attr(world, MPI_TAG_UB, &tag_ub, &found);
  if (found && tag_ub != nullptr) tag_limit_ = *tag_ub;

  const TrainSettings& train = settings_.train;
  if (train.memory_cap) SPW_TRY(MemoryLedger::process().set_cap(train.memory_cap));

  sched::ScheduleShape shape;
  shape.ranks = l.pipeline_ranks;
  shape.microbatches = l.microbatches;
  shape.chunks = l.chunks;
  shape.data_parallel = l.replicas > 1;
  SPW_ASSIGN_OR_RETURN(schedule_, sched::make_schedule(l.schedule, shape));
  if (settings_.offload.tier != OffloadTier::none) {
    sched::OffloadPolicy policy;
    policy.keep = settings_.offload.keep;
    policy.lookahead = settings_.offload.lookahead;
    SPW_ASSIGN_OR_RETURN(schedule_, sched::insert_offload(schedule_, policy));
  }
  stages_.emplace(schedule_);  // schedule_ is final from here on
  // Decided alike on every rank, before the collectives below.
  const int last_stage = l.stage_count() - 1;
  if (train.model.kind == "gpt" && train.model.gpt.head_chunk_rows > 0 &&
      schedule_.forward_rank_of(last_stage) != schedule_.backward_rank_of(last_stage)) {
    return error(StatusCode::unsupported,
                 "model.head_chunk_rows computes the head's weight gradient in its forward, and "
                 "this layout (PipeFB) runs the head's backward on another rank: use a classic "
                 "layout, or model.head_chunk_rows = 0");
  }
  const auto rank_list = static_cast<std::size_t>(pipeline_rank_);
  training_ = program_for(schedule_.lists[rank_list]);
  training_.sums_loss = true;
  // The evaluation's placement is the training schedule's, so stages_ serves both.
  SPW_ASSIGN_OR_RETURN(const sched::Schedule evaluation, sched::make_evaluation(schedule_));
  evaluation_ = program_for(evaluation.lists[rank_list]);
  const std::vector<sched::Instruction>& list = training_.list;
  if (train.clip_grad_norm > 0) {
    // Collective, and every rank gets here from the same schedule.
    const bool steps = std::any_of(list.begin(), list.end(), [](const sched::Instruction& in) {
      return in.op == sched::Op::optimizer_step;
    });
    SPW_TRY(mpi_check(MPI_Comm_split(world, steps ? replica_ : MPI_UNDEFINED, pipeline_rank_,
                                     &clip_comm_),
                      "creating the gradient-clipping communicator"));
    if (clip_comm_ != MPI_COMM_NULL) MPI_Comm_set_errhandler(clip_comm_, MPI_ERRORS_RETURN);
  }
  const int tags_needed = (l.microbatches + 1) * l.stage_count() * 4;
  if (tags_needed > tag_limit_) {
    return error(StatusCode::unsupported,
                 "this MPI allows message tags up to " + std::to_string(tag_limit_) + " but " +
                     std::to_string(l.microbatches) + " microbatches over " +
                     std::to_string(l.stage_count()) + " stages need " +
                     std::to_string(tags_needed) + ": use fewer microbatches or stages");
  }

  {
    // Before anything that can fail on one rank alone: the check is collective.
    BlockMemory mine;
    for (int c = 0; c < schedule_.chunks_on(pipeline_rank_); ++c) {
      const StageRange& range =
          l.stages[static_cast<std::size_t>(schedule_.stage(pipeline_rank_, c))];
      const bool trains = schedule_.stage_of(pipeline_rank_, c, sched::Direction::backward) >= 0 &&
                          !train.inference_only;
      const BlockMemory chunk = block_memory(train.model, range.first, range.last, trains,
                                             trains ? &train.optimizer : nullptr);
      mine.parameters += chunk.parameters;
      mine.bytes += chunk.bytes;
      if (mine.holds.size() < chunk.holds.size()) mine.holds = chunk.holds;
    }
    SPW_TRY(check_ranks_fit_node(world, mine));
  }

  SPW_ASSIGN_OR_RETURN(DataSources sources,
                       open_data_sources(train.data, train.model, train.seed, train.evaluates));
  data_ = std::move(sources.training);
  evaluation_data_ = std::move(sources.evaluation);
  const std::int64_t batch = train.batch;
  total_steps_ =
      train.steps > 0 ? train.steps : train.epochs * (data_->samples_per_epoch() / batch);
  if (total_steps_ < 1) {
    return error(StatusCode::invalid_argument,
                 "the job has no steps: set train.steps, or train.epochs with a data set "
                 "of at least one batch");
  }
  end_open_decay_at(settings_.train.optimizer.schedule, total_steps_);
  std::vector<NamedParameter> all, trained;
  // Parameters whose stage's backward runs here: each counted once over a replica's ranks.
  std::size_t owned_count = 0;
  const int local_chunks = schedule_.chunks_on(pipeline_rank_);
  for (int c = 0; c < local_chunks; ++c) {
    chunk_stage_.push_back(schedule_.stage(pipeline_rank_, c));
    chunk_backward_.push_back(
        schedule_.stage_of(pipeline_rank_, c, sched::Direction::backward) >= 0);
    const StageRange& range = l.stages[static_cast<std::size_t>(global_stage(c))];
    std::optional<WithoutGradients> forward_only;
    const bool trains = runs_backward(c) && !train.inference_only;
    if (!trains) forward_only.emplace();
    SPW_ASSIGN_OR_RETURN(auto chunk, Model::build(train.model, range.first, range.last));
    forward_only.reset();
    SPW_TRY(chunk->init_parameters(train.seed));
    for (std::size_t b = 0; b < chunk->size(); ++b) {
      reads_batches_ = reads_batches_ || chunk->block(b).reads_data() ||
                       chunk->block(b).computes_loss();
    }
    const std::vector<NamedParameter> parameters = chunk->parameters();
    for (std::size_t k = 0; k < parameters.size(); ++k) {
      all.push_back(parameters[k]);
      if (!runs_backward(c)) continue;
      owned_count += static_cast<std::size_t>(parameters[k].value->numel());
      if (train.inference_only) continue;
      trained.push_back(parameters[k]);
      clip_order_.push_back(static_cast<double>(global_stage(c)) * (1 << 20) +
                            static_cast<double>(k));
    }
    chunks_.push_back(std::move(chunk));
  }
  if (!train.init_from.empty()) SPW_TRY(load_parameters(train.init_from, all));
  if (!trained.empty()) {
    SPW_ASSIGN_OR_RETURN(optimizer_, make_optimizer(train.optimizer, trained));
  }

  unsigned long long mine = replica_ == 0 ? owned_count : 0;
  unsigned long long total = 0;
  SPW_TRY(mpi_check(MPI_Allreduce(&mine, &total, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, world),
                    "counting parameters"));
  model_parameters_ = static_cast<std::size_t>(total);

  for (std::size_t i = 0; i < list.size(); ++i) {
    const sched::Instruction& in = list[i];
    if (in.op != sched::Op::forward) continue;
    Model& chunk = *chunks_[static_cast<std::size_t>(in.chunk)];
    if (chunk.block(chunk.size() - 1).computes_loss()) {
      training_.loss_final_after = static_cast<std::ptrdiff_t>(i);
    }
  }

  chunk_offloads_.assign(chunks_.size(), false);
  for (const sched::Instruction& in : list) {
    if (in.op == sched::Op::offload) chunk_offloads_[static_cast<std::size_t>(in.chunk)] = true;
  }

  const auto m = static_cast<std::size_t>(l.microbatches);
  buffers_.resize(m);
  microbatches_.resize(m);
  losses_.assign(m, 0.0);
  slots_.resize(chunks_.size());
  free_slots_.resize(chunks_.size());
  if (settings_.offload.tier != OffloadTier::none) {
    spare_kinds_.resize(chunks_.size());
    on_miss_.resize(chunks_.size());
    for (std::size_t c = 0; c < chunks_.size(); ++c) {
      spares_.push_back(std::make_unique<Slot>());
      Slot& spare = *spares_.back();
      spare.states.resize(chunks_[c]->size());
      spare_kinds_[c][kStashMemory].push_back(&spare.acts);
      spare_kinds_[c][kGradientBuffers].push_back(&spare.grads);
      for (BlockState& state : spare.states) {
        spare_kinds_[c][kStashMemory].push_back(&state.saved);
        spare_kinds_[c][kGradientBuffers].push_back(&state.grads);
      }
      for (int kind : {kStashMemory, kGradientBuffers}) {
        on_miss_[c][kind] = [this, c, kind] { before_mapping(static_cast<int>(c), kind); };
      }
    }
  }
  active_.assign(chunks_.size(), std::vector<Slot*>(m, nullptr));
  reduce_started_.assign(chunks_.size(), -1.0);
  // Nothing to zero before the first step (an evaluation may come first); run_step resets it.
  grads_zeroed_.assign(chunks_.size(), kGradsZeroed);
  timings_.resize(chunks_.size());
  stash_estimate_.assign(chunks_.size(), 0);
  grads_estimate_.assign(chunks_.size(), 0);
  return learn_stash_layouts();
}

std::vector<NamedParameter> PipelineExecutor::local_parameters() {
  std::vector<NamedParameter> all;
  for (auto& chunk : chunks_) {
    for (auto& p : chunk->parameters()) all.push_back(p);
  }
  return all;
}

std::int64_t PipelineExecutor::activation_bytes(int chunk) const {
  const Model& model = *chunks_[static_cast<std::size_t>(chunk)];
  MicrobatchData mb;
  mb.samples = layout().microbatch_samples;
  mb.seq = settings_.train.model.positions_per_sample();
  const Shape shape = model.spec().activation_shape(
      model.first_block() + static_cast<std::int64_t>(model.size()) - 1, mb);
  return shape.rank() == 0 ? 0 : shape.numel() * static_cast<std::int64_t>(sizeof(float));
}

std::int64_t PipelineExecutor::parameter_bytes(int chunk) {
  std::int64_t bytes = 0;
  for (const auto& p : chunks_[static_cast<std::size_t>(chunk)]->parameters()) {
    bytes += static_cast<std::int64_t>(p.value->bytes());
  }
  return bytes;
}

PipelineExecutor::Program PipelineExecutor::program_for(std::vector<sched::Instruction> list) {
  Program program;
  program.list = std::move(list);
  for (std::size_t i = 0; i < program.list.size(); ++i) {
    if (sched::is_recv(program.list[i].op)) program.receive_positions.push_back(i);
  }
  return program;
}

Status PipelineExecutor::load_microbatches(const BatchSource& source, std::int64_t step,
                                           bool training) {
  const PipelineLayout& l = layout();
  const std::int64_t micro = l.microbatch_samples;
  const std::int64_t positions = settings_.train.model.positions_per_sample();
  const float scale =
      static_cast<float>(1.0 / static_cast<double>(settings_.train.batch * positions));
  for (int k = 0; k < l.microbatches; ++k) {
    const auto i = static_cast<std::size_t>(k);
    // Replica r takes the r-th contiguous share of the batch, in the order the single-rank
    // trainer walks it, so microbatch (r, k) is the trainer's microbatch r * m + k.
    const std::int64_t first = (static_cast<std::int64_t>(replica_) * l.microbatches + k) * micro;
    MicrobatchData mb;
    if (reads_batches_) {
      SPW_TRY(source.fill(step, first, micro, settings_.train.batch, buffers_[i]));
      mb = buffers_[i].view(micro, positions);
    } else {
      mb.samples = micro;
      mb.seq = positions;
    }
    mb.grad_scale = scale;
    mb.backward_follows = training;
    microbatches_[i] = mb;
  }
  return Status::success();
}

Result<Tensor*> PipelineExecutor::chunk_input(Slot& s, int chunk, int mb) {
  const Model& model = *chunks_[static_cast<std::size_t>(chunk)];
  if (model.first_block() == 0) return static_cast<Tensor*>(nullptr);
  return s.acts.get(0, model.spec().activation_shape(model.first_block() - 1,
                                                     microbatches_[static_cast<std::size_t>(mb)]));
}

Result<Tensor*> PipelineExecutor::chunk_output_grad(Slot& s, int chunk, int mb) {
  Model& model = *chunks_[static_cast<std::size_t>(chunk)];
  const std::size_t last = model.size() - 1;
  const Shape shape = model.block(last).output_shape(microbatches_[static_cast<std::size_t>(mb)]);
  if (shape.rank() == 0) return static_cast<Tensor*>(nullptr);  // the loss block
  return s.grads.get(last + 1, shape);
}

Status PipelineExecutor::forward(int mb, int chunk) {
  SPW_TRY(make_room(stash_estimate_[static_cast<std::size_t>(chunk)]));
  if (!runs_backward(chunk)) SPW_TRY(wait_for_stashes_taken(chunk));
  SPW_ASSIGN_OR_RETURN(Slot * s, slot(chunk, mb));
  Model& model = *chunks_[static_cast<std::size_t>(chunk)];
  const MicrobatchData& data = microbatches_[static_cast<std::size_t>(mb)];
  SPW_ASSIGN_OR_RETURN(Tensor * input, chunk_input(*s, chunk, mb));
  if (data.backward_follows && accumulates_in_forward(chunk)) {
    SPW_TRY(zero_stale_grads(chunk, nullptr).status());
  }
  for (std::size_t b = 0; b < model.size(); ++b) {
    Block& block = model.block(b);
    const Shape shape = block.output_shape(data);
    Tensor* output = nullptr;
    if (shape.rank() > 0) {  // the loss block hands on nothing
      SPW_ASSIGN_OR_RETURN(output, s->acts.get(b + 1, shape));
    }
    double loss = 0;
    SPW_TRY(block.forward(data, b == 0 ? input : &s->acts.at(b), output, s->states[b], &loss));
    if (block.computes_loss()) {
      losses_[static_cast<std::size_t>(mb)] = loss;
      if (capture_position_ >= 0 && mb == 0 && replica_ == 0) {
        SPW_TRY(capture_logits(block.logits(s->states[b])));
      }
    }
    SPW_TRY(poke_communication());
  }
  if (engine_) {
    std::size_t& estimate = stash_estimate_[static_cast<std::size_t>(chunk)];
    estimate = std::max(estimate, bytes_held(*s));
  }
  // With one pipeline rank the next stage is local: hand the output over directly.
  const int stage = global_stage(chunk);
  if (stage + 1 < layout().stage_count() &&
      schedule_.forward_rank_of(stage + 1) == pipeline_rank_) {
    const int next_chunk = schedule_.chunk_of(stage + 1, sched::Direction::forward);
    SPW_ASSIGN_OR_RETURN(Slot * next, slot(next_chunk, mb));
    SPW_ASSIGN_OR_RETURN(Tensor * next_input, chunk_input(*next, next_chunk, mb));
    SPW_TRY(next_input->copy_from(s->acts.at(model.size())));
  }
  return Status::success();
}

Status PipelineExecutor::backward_input(int mb, int chunk) {
  SPW_ASSIGN_OR_RETURN(Slot * s, slot(chunk, mb));
  SPW_TRY(ensure_resident(*s, chunk, mb));
  // Its gradients need room too: under a cap, let the spares go and pending evictions finish
  // first (all of them until one backward has shown how much it takes).
  std::size_t& estimate = grads_estimate_[static_cast<std::size_t>(chunk)];
  SPW_TRY(make_room(estimate));
  Model& model = *chunks_[static_cast<std::size_t>(chunk)];
  const MicrobatchData& data = microbatches_[static_cast<std::size_t>(mb)];
  SPW_ASSIGN_OR_RETURN(Tensor * input, chunk_input(*s, chunk, mb));
  SPW_ASSIGN_OR_RETURN(Tensor * doutput, chunk_output_grad(*s, chunk, mb));
  // The input gradient before the others: the spare lacks it when the microbatch before's is
  // still being sent, and asked for while the other gradient buffers are parked there, it
  // leaves the stash parked for the next prefetch alone (before_mapping).
  if (input != nullptr) SPW_TRY(s->grads.get(0, input->shape()).status());
  for (std::size_t b = model.size(); b-- > 0;) {
    Block& block = model.block(b);
    const Tensor* block_input = b == 0 ? input : &s->acts.at(b);
    Tensor* dinput = nullptr;
    if (block_input != nullptr) {
      SPW_ASSIGN_OR_RETURN(dinput, s->grads.get(b, block_input->shape()));
    }
    const Tensor* block_doutput = b + 1 == model.size() ? doutput : &s->grads.at(b + 1);
    SPW_TRY(block.backward_input(data, block_input, block_doutput, dinput, s->states[b]));
    SPW_TRY(poke_communication());
  }
  if (engine_) {
    std::size_t bytes = s->grads.bytes();
    for (const BlockState& state : s->states) bytes += state.grads.bytes();
    estimate = std::max(estimate, bytes);
  }
  const int stage = global_stage(chunk);
  if (stage > 0 && schedule_.backward_rank_of(stage - 1) == pipeline_rank_) {
    const int previous_chunk = schedule_.chunk_of(stage - 1, sched::Direction::backward);
    SPW_ASSIGN_OR_RETURN(Slot * previous, slot(previous_chunk, mb));
    SPW_ASSIGN_OR_RETURN(Tensor * previous_doutput,
                         chunk_output_grad(*previous, previous_chunk, mb));
    SPW_TRY(previous_doutput->copy_from(s->grads.at(0)));
  }
  return Status::success();
}

Status PipelineExecutor::backward_weight(int mb, int chunk) {
  SPW_ASSIGN_OR_RETURN(Slot * s, slot(chunk, mb));
  SPW_TRY(ensure_resident(*s, chunk, mb));
  Model& model = *chunks_[static_cast<std::size_t>(chunk)];
  const MicrobatchData& data = microbatches_[static_cast<std::size_t>(mb)];
  SPW_ASSIGN_OR_RETURN(Tensor * input, chunk_input(*s, chunk, mb));
  SPW_ASSIGN_OR_RETURN(Tensor * doutput, chunk_output_grad(*s, chunk, mb));
  SPW_TRY(zero_stale_grads(chunk, nullptr).status());
  for (std::size_t b = model.size(); b-- > 0;) {
    const Tensor* block_input = b == 0 ? input : &s->acts.at(b);
    const Tensor* block_doutput = b + 1 == model.size() ? doutput : &s->grads.at(b + 1);
    SPW_TRY(model.block(b).backward_weight(data, block_input, block_doutput, s->states[b]));
    SPW_TRY(poke_communication());
  }
  s->weight_done = true;
  return retire_if_done(chunk, mb);
}

// The first W of a step must not add to the last step's gradients. Zeroing them all (12.8 MB
// for a stage of gpt-s) made W0 1.3-1.6 ms longer than the chunk's other W's; the rank now
// zeroes them while it waits for a message (zero_grads_while_waiting), where it would idle,
// and the W zeroes only what is left.
// A tensor at a time (1 MiB at most for gpt-s), from where the last call stopped; with
// `until_arrived`, testing those requests before each tensor and stopping once they complete,
// so that a message waits at most one tensor's zeroing. Returns whether they completed.
Result<bool> PipelineExecutor::zero_stale_grads(int chunk,
                                                std::vector<MPI_Request>* until_arrived) {
  std::size_t& zeroed = grads_zeroed_[static_cast<std::size_t>(chunk)];
  if (zeroed == kGradsZeroed) return false;
  const std::vector<NamedParameter> parameters =
      chunks_[static_cast<std::size_t>(chunk)]->parameters();
  for (; zeroed < parameters.size(); ++zeroed) {
    if (until_arrived != nullptr) {
      int arrived = 0;
      SPW_TRY(mpi_check(MPI_Testall(static_cast<int>(until_arrived->size()),
                                    until_arrived->data(), &arrived, MPI_STATUSES_IGNORE),
                        "receiving from a neighbouring pipeline rank"));
      if (arrived != 0) return true;
    }
    if (parameters[zeroed].grad != nullptr) parameters[zeroed].grad->fill(0.0f);
  }
  zeroed = kGradsZeroed;
  return false;
}

bool PipelineExecutor::accumulates_in_forward(int chunk) const {
  const Model& model = *chunks_[static_cast<std::size_t>(chunk)];
  for (std::size_t b = 0; b < model.size(); ++b) {
    if (model.block(b).accumulates_in_forward()) return true;
  }
  return false;
}

Result<double> PipelineExecutor::zero_grads_while_waiting(std::vector<MPI_Request>& requests) {
  double seconds = 0;
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    const int chunk = static_cast<int>(c);
    if (grads_zeroed_[c] == kGradsZeroed || !runs_backward(chunk)) continue;
    const std::size_t first = grads_zeroed_[c];
    const double start = now();
    SPW_ASSIGN_OR_RETURN(const bool arrived, zero_stale_grads(chunk, &requests));
    const double end = now();
    seconds += end - start;
    if (tracing_ && grads_zeroed_[c] != first) {
      sched::Instruction zeroing;
      zeroing.op = sched::Op::backward_weight;
      zeroing.chunk = chunk;
      record(TraceTrack::compute, zeroing, 0, start, end);
      trace_.back().zeroing_grads = true;
    }
    if (arrived) break;
  }
  return seconds;
}

Status PipelineExecutor::optimizer_step() {
  if (!reduce_requests_.empty()) {
    SPW_TRY(mpi_check(MPI_Waitall(static_cast<int>(reduce_requests_.size()),
                                  reduce_requests_.data(), MPI_STATUSES_IGNORE),
                      "finishing the gradient all-reduce"));
    SPW_TRY(progress());  // records the completion; the requests are now null
    reduces_done_ = true;
    reduce_requests_.clear();
  }
  if (!optimizer_) {
    return error(StatusCode::internal, "OptimizerStep on a rank that runs no backward");
  }
  if (clip_comm_ != MPI_COMM_NULL) SPW_TRY(clip_gradients());
  return optimizer_->step();
}

Status PipelineExecutor::clip_gradients() {
  // Every rank gathers every trained parameter's sum of squares with its place in the model,
  // and adds them in the model's order: the trainer's sum, to the bit.
  const std::vector<NamedParameter>& mine = optimizer_->parameters();
  std::vector<double> pairs;
  pairs.reserve(2 * mine.size());
  for (std::size_t i = 0; i < mine.size(); ++i) {
    pairs.push_back(clip_order_[i]);
    pairs.push_back(squared_norm(*mine[i].grad));
  }
  int ranks = 0;
  MPI_Comm_size(clip_comm_, &ranks);
  std::vector<int> counts(static_cast<std::size_t>(ranks));
  std::vector<int> offsets(static_cast<std::size_t>(ranks));
  const int count = static_cast<int>(pairs.size());
  SPW_TRY(mpi_check(MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, clip_comm_),
                    "gathering the gradient norms' sizes"));
  int total = 0;
  for (int r = 0; r < ranks; ++r) {
    offsets[static_cast<std::size_t>(r)] = total;
    total += counts[static_cast<std::size_t>(r)];
  }
  std::vector<double> all(static_cast<std::size_t>(total));
  SPW_TRY(mpi_check(MPI_Allgatherv(pairs.data(), count, MPI_DOUBLE, all.data(), counts.data(),
                                   offsets.data(), MPI_DOUBLE, clip_comm_),
                    "gathering the gradient norms"));
  std::vector<std::pair<double, double>> sums;
  for (std::size_t i = 0; i + 1 < all.size(); i += 2) sums.emplace_back(all[i], all[i + 1]);
  std::sort(sums.begin(), sums.end());
  double sum = 0;
  for (const auto& [order, squares] : sums) sum += squares;
  grad_norm_ = std::sqrt(sum);
  scale_gradients(mine, clip_coefficient(*grad_norm_, settings_.train.clip_grad_norm));
  return Status::success();
}

void PipelineExecutor::record(TraceTrack track, const sched::Instruction& in,
                              std::int64_t bytes, double start, double end) {
  if (!tracing_) return;
  TraceEvent event;
  event.rank = world_rank_;
  event.step = static_cast<int>(evaluation_batch_ > 0 ? step_ : step_ + 1);
  event.evaluation_batch = evaluation_batch_;
  event.track = track;
  event.instruction = in;
  event.stage = in.chunk >= 0 ? global_stage(in.chunk) : -1;
  event.bytes = bytes;
  event.start_s = start;
  event.end_s = end;
  trace_.push_back(event);
}

Status PipelineExecutor::execute(const sched::Instruction& in, std::size_t position) {
  using sched::Op;
  const double start = now();
  switch (in.op) {
    case Op::forward: SPW_TRY(forward(in.mb, in.chunk)); break;
    case Op::backward_input: SPW_TRY(backward_input(in.mb, in.chunk)); break;
    case Op::backward_weight: SPW_TRY(backward_weight(in.mb, in.chunk)); break;
    case Op::send_act:
    case Op::send_grad:
    case Op::send_stash:
    case Op::send_params: {
      const Result<std::int64_t> bytes = in.op == Op::send_stash    ? send_stash(in)
                                         : in.op == Op::send_params ? send_params(in)
                                                                    : send(in);
      if (!bytes.ok()) return bytes.status();
      current_.sent_bytes += *bytes;
      record(TraceTrack::communication, in, *bytes, start, now());
      return progress();
    }
    case Op::recv_act:
    case Op::recv_grad:
    case Op::recv_stash:
    case Op::recv_params: return receive(in, position);
    case Op::reduce_grads: return reduce_grads(in.chunk);
    case Op::optimizer_step:
      SPW_TRY(optimizer_step());
      current_.optimizer_s += now() - start;
      break;
    case Op::offload:
      SPW_TRY(offload(in.mb, in.chunk));
      return progress();
    case Op::prefetch:
      SPW_TRY(prefetch(in.mb, in.chunk));
      return progress();
    case Op::drop_stash: {
      SPW_ASSIGN_OR_RETURN(Slot * s, slot(in.chunk, in.mb));
      s->dropped = true;
      SPW_TRY(retire_if_done(in.chunk, in.mb));
      return progress();
    }
  }
  const double end = now();
  current_.busy_s += end - start;
  if (in.chunk >= 0) {
    ChunkTiming& t = timings_[static_cast<std::size_t>(in.chunk)];
    const double seconds = end - start;
    if (in.op == Op::forward) {  // a forward-only chunk (PipeFB) counts here alone
      t.forward_s += seconds;
      t.forward_samples += 1;
    }
    if (in.op == Op::backward_input) t.backward_input_s += seconds;
    if (in.op == Op::backward_weight) {
      t.backward_weight_s += seconds;
      t.samples += 1;
    }
  }
  record(TraceTrack::compute, in, 0, start, end);
  return progress();
}

Status PipelineExecutor::run_step(StepResult& result) {
  if (settings_.train.inference_only) {
    return error(StatusCode::unsupported,
                 "this pipeline was built for forwards only (inference_only): it cannot train");
  }
  step_start_ = now();
  const std::int64_t step = step_ + 1;
  tracing_ = settings_.trace_steps > 0 && step >= settings_.trace_first_step &&
             step < settings_.trace_first_step + settings_.trace_steps;
  // Timings from the first step (allocation, warm-up) are replaced by later ones.
  if (step_ == 1) std::fill(timings_.begin(), timings_.end(), ChunkTiming{});
  current_ = RankStepMetrics{};
  grad_norm_.reset();
  const std::size_t reserved_before = MemoryLedger::process().reserved_total();
  // Gradients are zeroed while the rank waits for a message, or by each chunk's first W, not
  // here: on the first rank this would delay the step's first forward, which every other rank
  // waits for.
  grads_zeroed_.assign(chunks_.size(), 0);
  SPW_TRY(load_microbatches(*data_, step_, true));
  SPW_TRY(run_program(training_, "step", step));
  current_.span_s = now() - step_start_;
  current_.allocated_bytes =
      static_cast<std::int64_t>(MemoryLedger::process().reserved_total() - reserved_before);
  SPW_TRY(mpi_check(MPI_Wait(&loss_request_, MPI_STATUS_IGNORE), "summing the step's loss"));
  const double batch_loss = loss_sum_;
  ++step_;
  metrics_.push_back(current_);
  const double seconds = now() - step_start_;
  result.step = step_;
  result.loss = batch_loss;
  result.seconds = seconds;
  result.items_per_second =
      static_cast<double>(settings_.train.batch * settings_.train.model.positions_per_sample()) /
      seconds;
  // A pure function of the step, so every rank knows it, optimizer or not.
  result.learning_rate =
      scheduled_lr(settings_.train.optimizer.lr, settings_.train.optimizer.schedule, step);
  result.grad_norm = grad_norm_;
  return Status::success();
}

Status PipelineExecutor::run_program(const Program& program, const char* pass,
                                     std::int64_t number) {
  program_ = &program;
  std::fill(losses_.begin(), losses_.end(), 0.0);
  posted_.assign(program.receive_positions.size(), PostedReceive{});
  next_to_post_ = 0;
  next_to_receive_ = 0;
  if (!program.receive_positions.empty()) {
    SPW_TRY(post_receives_through(static_cast<std::size_t>(settings_.receive_lookahead) - 1,
                                  program.receive_positions.size()));
  }
  if (program.sums_loss && program.loss_final_after < 0) SPW_TRY(start_loss_sum());
  for (std::size_t i = 0; i < program.list.size(); ++i) {
    Status status = execute(program.list[i], i);
    if (status.ok() && program.sums_loss &&
        static_cast<std::ptrdiff_t>(i) == program.loss_final_after) {
      status = start_loss_sum();
    }
    if (!status.ok()) {
      return status.with_context(std::string(pass) + " " + std::to_string(number) +
                                 ", instruction " + sched::to_string(program.list[i]));
    }
  }
  return finish_sends();
}

Status PipelineExecutor::check_same_data() const {
  // Each rank opens data.path itself, and a copy staged to node-local storage can differ:
  // the first stage would then read its tokens from one corpus and the last its targets
  // from another, and training would go on without an error.
  constexpr int kFields = 3;
  const std::uint64_t mine[kFields] = {data_->digest(),
                                       static_cast<std::uint64_t>(data_->samples_per_epoch()),
                                       evaluation_data_ ? evaluation_data_->digest() : 0};
  int size = 1;
  MPI_Comm_size(world_, &size);
  std::vector<std::uint64_t> all(static_cast<std::size_t>(kFields * size));
  SPW_TRY(mpi_check(
      MPI_Allgather(mine, kFields, MPI_UINT64_T, all.data(), kFields, MPI_UINT64_T, world_),
      "comparing the ranks' data"));
  const auto fields_of = [&](int rank) {
    const std::uint64_t* f = all.data() + static_cast<std::size_t>(kFields * rank);
    char text[96];
    std::snprintf(text, sizeof text, "digest %016llx, %llu samples a pass",
                  static_cast<unsigned long long>(f[0]), static_cast<unsigned long long>(f[1]));
    std::string out = text;
    if (evaluation_data_) {
      std::snprintf(text, sizeof text, ", held out %016llx", static_cast<unsigned long long>(f[2]));
      out += text;
    }
    return out;
  };
  for (int rank = 1; rank < size; ++rank) {
    if (std::equal(all.begin(), all.begin() + kFields, all.begin() + kFields * rank)) continue;
    std::string message = "rank " + std::to_string(rank);
    message += " reads other data than rank 0 (" + fields_of(rank) + ", against " + fields_of(0) +
               "): every rank must read the same data.path; copy it whole to " +
               "each node, or use a file system they share";
    return error(StatusCode::invalid_argument, message);
  }
  return Status::success();
}

std::string PipelineExecutor::data_description() const {
  return describe_data(*data_, evaluation_data_.get());
}

Status PipelineExecutor::open_evaluation_data() {
  // Opening is agreed, so every rank holds the data or none does.
  if (evaluation_data_) return Status::success();
  auto opened = open_evaluation_source(settings_.train.data, settings_.train.model,
                                       settings_.train.seed);
  SPW_TRY(agree_on_status(world_, opened.status()));
  evaluation_data_ = std::move(*opened);
  return Status::success();
}

Status PipelineExecutor::outside_steps(const std::function<Status()>& passes) {
  const RankStepMetrics metrics = current_;
  const std::vector<ChunkTiming> timings = timings_;
  const Status status = passes();
  program_ = &training_;
  current_ = metrics;
  timings_ = timings;
  return status;
}

Result<double> PipelineExecutor::evaluate(int batches) {
  if (batches < 1) {
    return error(StatusCode::invalid_argument,
                 "an evaluation needs at least one batch, got " + std::to_string(batches));
  }
  SPW_TRY(open_evaluation_data());
  // The trace shows an evaluation after the step it follows when that step was traced
  // (tracing_ is that step's), so a traced window shows where its time went.
  const std::int64_t micro = layout().microbatch_samples;
  double share = 0;
  SPW_TRY(outside_steps([&] {
    Status status;
    for (int k = 0; k < batches && status.ok(); ++k) {
      status = load_microbatches(*evaluation_data_, k, false);
      if (status.ok()) {
        evaluation_batch_ = k + 1;
        status = run_program(evaluation_, "evaluation batch", k + 1);
        evaluation_batch_ = 0;
      }
      for (double l : losses_) {
        share += l * static_cast<double>(micro) / static_cast<double>(settings_.train.batch);
      }
    }
    return status;
  }));
  double sum = 0;
  SPW_TRY(mpi_check(MPI_Allreduce(&share, &sum, 1, MPI_DOUBLE, MPI_SUM, world_),
                    "summing the evaluation's loss"));
  return sum / batches;
}

Status PipelineExecutor::capture_logits(const Tensor* logits) {
  if (logits == nullptr) {  // next_token_logits refuses a chunked head before the pass
    return error(StatusCode::internal, "the head kept no logits for a sampling pass");
  }
  const auto vocab = static_cast<std::size_t>(logits->shape().cols());
  const float* row = logits->data() + static_cast<std::size_t>(capture_position_) * vocab;
  captured_logits_.assign(row, row + vocab);
  return Status::success();
}

Result<std::vector<float>> PipelineExecutor::next_token_logits(
    const std::vector<std::int32_t>& window, std::size_t last) {
  const ModelSpec& model = settings_.train.model;
  if (model.kind != "gpt") {
    return error(StatusCode::invalid_argument,
                 "next-token logits need a gpt; this job's model.kind is \"" + model.kind + "\"");
  }
  // Checked before the pass, where every rank sees it alike.
  if (model.gpt.head_chunk_rows > 0) {
    return error(StatusCode::unsupported,
                 "this gpt's head is chunked (model.head_chunk_rows) and keeps no logits: build "
                 "the pipeline with head_chunk_rows = 0 to read them");
  }
  const auto seq = static_cast<std::size_t>(model.gpt.seq);
  if (window.size() != seq || last >= seq) {
    return error(StatusCode::invalid_argument,
                 "a window of " + std::to_string(window.size()) + " tokens ending at position " +
                     std::to_string(last) + " for a model of model.seq " + std::to_string(seq) +
                     ": give model.seq tokens and a position below it");
  }
  const PipelineLayout& l = layout();
  const std::int64_t micro = l.microbatch_samples;
  const std::vector<std::int32_t> zeros(seq, 0);
  for (int k = 0; k < l.microbatches; ++k) {
    const auto i = static_cast<std::size_t>(k);
    MicrobatchBuffers& buffers = buffers_[i];
    buffers.tokens.clear();
    buffers.targets.clear();
    for (std::int64_t n = 0; n < micro; ++n) {
      buffers.tokens.insert(buffers.tokens.end(), window.begin(), window.end());
      buffers.targets.insert(buffers.targets.end(), zeros.begin(), zeros.end());
    }
    MicrobatchData mb = buffers.view(micro, static_cast<std::int64_t>(seq));
    mb.grad_scale = 1;
    mb.backward_follows = false;
    microbatches_[i] = mb;
  }
  capture_position_ = static_cast<std::int64_t>(last);
  captured_logits_.clear();
  const Status status = outside_steps([&] { return run_program(evaluation_, "sampling pass", 1); });
  capture_position_ = -1;
  SPW_TRY(status);
  // Replica 0's ranks are world ranks 0 to ranks_in_pipeline - 1, in pipeline order: its
  // head's logits are on the rank that runs the last stage's forward.
  const int holder = schedule_.forward_rank_of(l.stage_count() - 1);
  const auto count = static_cast<int>(model.gpt.vocab);
  if (world_rank_ == holder && captured_logits_.size() != static_cast<std::size_t>(count)) {
    return error(StatusCode::internal, "the head's rank captured no logits in a sampling pass");
  }
  captured_logits_.resize(static_cast<std::size_t>(count));
  SPW_TRY(mpi_check(MPI_Bcast(captured_logits_.data(), count, MPI_FLOAT, holder, world_),
                    "sending the logits"));
  return std::move(captured_logits_);
}

Result<std::map<std::string, std::vector<float>>> PipelineExecutor::gather_parameters(
    int replica) {
  // Serialise as [name length, name bytes, value count, values] records of bytes.
  std::vector<char> mine;
  if (replica_ == replica && owns_parameters()) {
    for (auto& p : local_parameters()) {
      const std::uint64_t name_size = p.name.size();
      const std::uint64_t count = static_cast<std::uint64_t>(p.value->numel());
      const char* header = reinterpret_cast<const char*>(&name_size);
      mine.insert(mine.end(), header, header + sizeof name_size);
      mine.insert(mine.end(), p.name.begin(), p.name.end());
      const char* count_bytes = reinterpret_cast<const char*>(&count);
      mine.insert(mine.end(), count_bytes, count_bytes + sizeof count);
      const char* values = reinterpret_cast<const char*>(p.value->data());
      mine.insert(mine.end(), values, values + count * sizeof(float));
    }
  }
  int size = 0;
  MPI_Comm_size(world_, &size);
  const int my_bytes = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<std::size_t>(size), 0);
  SPW_TRY(mpi_check(MPI_Gather(&my_bytes, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, world_),
                    "gathering parameter sizes"));
  std::vector<int> offsets(counts.size(), 0);
  for (std::size_t i = 1; i < counts.size(); ++i) offsets[i] = offsets[i - 1] + counts[i - 1];
  std::vector<char> all(world_rank_ == 0 ? static_cast<std::size_t>(offsets.back() + counts.back())
                                         : 0);
  SPW_TRY(mpi_check(MPI_Gatherv(mine.data(), my_bytes, MPI_CHAR, all.data(), counts.data(),
                                offsets.data(), MPI_CHAR, 0, world_),
                    "gathering parameters"));
  std::map<std::string, std::vector<float>> out;
  std::size_t at = 0;
  while (at < all.size()) {
    std::uint64_t name_size = 0;
    std::memcpy(&name_size, all.data() + at, sizeof name_size);
    at += sizeof name_size;
    std::string name(all.data() + at, name_size);
    at += name_size;
    std::uint64_t count = 0;
    std::memcpy(&count, all.data() + at, sizeof count);
    at += sizeof count;
    std::vector<float> values(count);
    std::memcpy(values.data(), all.data() + at, count * sizeof(float));
    at += count * sizeof(float);
    out[name] = std::move(values);
  }
  return out;
}

}  // namespace spw
