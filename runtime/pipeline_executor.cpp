#include "runtime/pipeline_executor.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <optional>

#include "kernels/memory_ledger.hpp"
#include "offload/file_tier.hpp"
#include "offload/host_tier.hpp"
#include "offload/peer_tier.hpp"
#include "partition/generators.hpp"
#include "partition/offload_pass.hpp"
#include "partition/simulator.hpp"
#include "partition/validator.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/mpi_support.hpp"
#include "runtime/parameter_store.hpp"

namespace spw {

// Everything one (chunk, microbatch) keeps between its forward and its weight gradient.
struct PipelineExecutor::Slot {
  Stash acts{MemoryCategory::stash};       // [0] chunk input, [b + 1] output of block b
  Stash grads{MemoryCategory::workspace};  // [0] input gradient, [b + 1] of block b's output
  std::vector<BlockState> states;          // [block]
  std::vector<MPI_Request> sends;
  bool weight_done = false;
  bool grad_sent = false;
  bool stash_sent = false;  // a forward-only chunk's slot is done once its stash has left
  // Where the stash is: resident, being copied out (its memory still held), out on the
  // capacity tier (its tensors given back, their places kept), or being copied back.
  enum class Residency { resident, evicting, offloaded, prefetching } residency = Residency::resident;
  std::vector<StashEntry> offloaded;  // stash tensors given back while out
  double transfer_started = 0;
};

namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Status waitall(std::vector<MPI_Request>& requests, const char* what) {
  if (requests.empty()) return Status::success();
  SPW_TRY(mpi_check(MPI_Waitall(static_cast<int>(requests.size()), requests.data(),
                                MPI_STATUSES_IGNORE),
                    what));
  requests.clear();
  return Status::success();
}

Result<int> element_count(const Tensor& tensor) {
  if (tensor.numel() > std::numeric_limits<int>::max()) {
    return error(StatusCode::unsupported,
                 "a tensor of " + std::to_string(tensor.numel()) +
                     " elements is too large for one MPI message: use more microbatches");
  }
  return static_cast<int>(tensor.numel());
}

}  // namespace

PipelineExecutor::~PipelineExecutor() {
  MemoryLedger::process().clear_pressure_handler(this);
  // The engine first: its thread may still copy out of slots, and a peer tier frees its
  // window collectively, at the same point on every rank.
  engine_.reset();
  // Requests still open here belong to a failed step; their buffers die with the slots.
  for (MPI_Comm* comm : {&pipeline_comm_, &replica_comm_}) {
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
  list_ = schedule_.lists[static_cast<std::size_t>(pipeline_rank_)];
  for (std::size_t i = 0; i < list_.size(); ++i) {
    if (sched::is_recv(list_[i].op)) receive_positions_.push_back(i);
  }
  const int tags_needed = (l.microbatches + 1) * l.stage_count() * 4;
  if (tags_needed > tag_limit_) {
    return error(StatusCode::unsupported,
                 "this MPI allows message tags up to " + std::to_string(tag_limit_) + " but " +
                     std::to_string(l.microbatches) + " microbatches over " +
                     std::to_string(l.stage_count()) + " stages need " +
                     std::to_string(tags_needed) + ": use fewer microbatches or stages");
  }

  SPW_ASSIGN_OR_RETURN(data_, open_batch_source(train.data, train.model, train.seed));
  std::vector<NamedParameter> all, trained;
  const int local_chunks = schedule_.chunks_on(pipeline_rank_);
  for (int c = 0; c < local_chunks; ++c) {
    chunk_stage_.push_back(schedule_.stage(pipeline_rank_, c));
    chunk_backward_.push_back(
        schedule_.stage_of(pipeline_rank_, c, sched::Direction::backward) >= 0);
    const StageRange& range = l.stages[static_cast<std::size_t>(global_stage(c))];
    std::optional<WithoutGradients> forward_only;
    if (!runs_backward(c)) forward_only.emplace();
    SPW_ASSIGN_OR_RETURN(auto chunk, Model::build(train.model, range.first, range.last));
    forward_only.reset();
    SPW_TRY(chunk->init_parameters(train.seed));
    for (std::size_t b = 0; b < chunk->size(); ++b) {
      reads_batches_ = reads_batches_ || chunk->block(b).reads_data() ||
                       chunk->block(b).computes_loss();
    }
    for (auto& p : chunk->parameters()) {
      all.push_back(p);
      if (runs_backward(c)) trained.push_back(p);
    }
    chunks_.push_back(std::move(chunk));
  }
  if (!train.init_from.empty()) SPW_TRY(load_parameters(train.init_from, all));
  if (!trained.empty()) {
    SPW_ASSIGN_OR_RETURN(optimizer_, make_optimizer(train.optimizer, trained));
  }

  std::size_t local_count = 0;
  for (const auto& p : trained) local_count += static_cast<std::size_t>(p.value->numel());
  unsigned long long mine = replica_ == 0 ? local_count : 0;
  unsigned long long total = 0;
  SPW_TRY(mpi_check(MPI_Allreduce(&mine, &total, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, world),
                    "counting parameters"));
  model_parameters_ = static_cast<std::size_t>(total);

  const std::int64_t batch = train.batch;
  total_steps_ = train.steps > 0 ? train.steps : train.epochs * (data_->samples_per_epoch() / batch);
  if (total_steps_ < 1) {
    return error(StatusCode::invalid_argument,
                 "the job has no steps: set train.steps, or train.epochs with a data set "
                 "of at least one batch");
  }

  for (std::size_t i = 0; i < list_.size(); ++i) {
    const sched::Instruction& in = list_[i];
    if (in.op != sched::Op::forward) continue;
    Model& chunk = *chunks_[static_cast<std::size_t>(in.chunk)];
    if (chunk.block(chunk.size() - 1).computes_loss()) {
      loss_final_after_ = static_cast<std::ptrdiff_t>(i);
    }
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

std::uint64_t PipelineExecutor::stash_id(int chunk, int mb) const {
  return static_cast<std::uint64_t>(mb) * chunks_.size() + static_cast<std::uint64_t>(chunk);
}

// What B and W read from the forward: every block's input (the chunk input first) and every
// block's saved state. The chunk's own output is not among them: it has gone to the next
// stage, and its send may still be reading it.
std::vector<PipelineExecutor::StashEntry> PipelineExecutor::stash_entries(const Slot& s,
                                                                          int chunk) const {
  std::vector<StashEntry> entries;
  const std::size_t blocks = chunks_[static_cast<std::size_t>(chunk)]->size();
  for (std::size_t i = 0; i < blocks && i < s.acts.slot_count(); ++i) {
    const Tensor& t = s.acts.at(i);
    if (t.allocation() != nullptr) entries.push_back({-1, i, t.shape()});
  }
  for (std::size_t b = 0; b < s.states.size(); ++b) {
    const Stash& saved = s.states[b].saved;
    for (std::size_t i = 0; i < saved.slot_count(); ++i) {
      const Tensor& t = saved.at(i);
      if (t.allocation() != nullptr) entries.push_back({static_cast<int>(b), i, t.shape()});
    }
  }
  return entries;
}

std::size_t PipelineExecutor::bytes_of(const std::vector<StashEntry>& entries) {
  std::size_t bytes = 0;
  for (const StashEntry& e : entries) bytes += static_cast<std::size_t>(e.shape.numel()) * sizeof(float);
  return bytes;
}

Stash& PipelineExecutor::stash_holding(Slot& s, const StashEntry& e) {
  return e.block < 0 ? s.acts : s.states[static_cast<std::size_t>(e.block)].saved;
}

std::vector<Tensor*> PipelineExecutor::stash_tensors(Slot& s, int chunk) {
  std::vector<Tensor*> tensors;
  for (const StashEntry& e : stash_entries(s, chunk)) tensors.push_back(&stash_holding(s, e).at(e.index));
  return tensors;
}

namespace {

std::vector<offload::Region> regions_of(const std::vector<Tensor*>& tensors) {
  std::vector<offload::Region> regions;
  for (Tensor* t : tensors) regions.push_back({t->data(), t->bytes()});
  return regions;
}

}  // namespace

// Runs the first microbatch's forward of `chunk` once on placeholder inputs, into a slot
// the caller reads and then hands back with return_placeholder(): what a stash holds is
// known only once a forward has filled one.
Result<PipelineExecutor::Slot*> PipelineExecutor::placeholder_forward(int chunk) {
  SPW_TRY(load_microbatches());
  SPW_ASSIGN_OR_RETURN(Slot * s, slot(chunk, 0));
  Model& model = *chunks_[static_cast<std::size_t>(chunk)];
  const MicrobatchData& data = microbatches_[0];
  SPW_ASSIGN_OR_RETURN(Tensor * input, chunk_input(*s, chunk, 0));
  if (input != nullptr) input->fill(0.0f);
  for (std::size_t b = 0; b < model.size(); ++b) {
    const Shape shape = model.block(b).output_shape(data);
    Tensor* output = nullptr;
    if (shape.rank() > 0) {
      SPW_ASSIGN_OR_RETURN(output, s->acts.get(b + 1, shape));
    }
    double loss = 0;
    SPW_TRY(model.block(b).forward(data, b == 0 ? input : &s->acts.at(b), output,
                                   s->states[b], &loss));
  }
  return s;
}

// The slot goes back to the pool empty: offloading runs keep no memory in pooled slots
// (release_if_offloading), and a stash receiver allocates as its layout says.
void PipelineExecutor::return_placeholder(int chunk) {
  const auto c = static_cast<std::size_t>(chunk);
  Slot* s = active_[c][0];
  active_[c][0] = nullptr;
  s->acts.release();
  s->grads.release();
  for (BlockState& state : s->states) state.release();
  free_slots_[c].push_back(s);
}

// The bytes one microbatch's stash holds on each chunk: the peer tier must size its window
// before any real forward runs.
Result<std::int64_t> PipelineExecutor::measure_stash_bytes() {
  std::int64_t largest = 0;
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    const int chunk = static_cast<int>(c);
    SPW_ASSIGN_OR_RETURN(Slot * s, placeholder_forward(chunk));
    std::int64_t bytes = 0;
    for (Tensor* t : stash_tensors(*s, chunk)) bytes += static_cast<std::int64_t>(t->bytes());
    largest = std::max(largest, bytes);
    stash_estimate_[c] = static_cast<std::size_t>(bytes) + s->grads.bytes();
    return_placeholder(chunk);
  }
  return largest;
}

// A chunk whose stashes arrive from another rank (PipeFB's backward rank) must lay out a
// slot exactly as the forward rank's forward did, tensor for tensor, before receiving into
// it: learnt from a placeholder forward of its own copy of the stage.
Status PipelineExecutor::learn_stash_layouts() {
  stash_layouts_.assign(chunks_.size(), {});
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    const int chunk = static_cast<int>(c);
    const int stage = global_stage(chunk);
    if (!runs_backward(chunk) || schedule_.forward_rank_of(stage) == pipeline_rank_) continue;
    SPW_ASSIGN_OR_RETURN(Slot * s, placeholder_forward(chunk));
    std::vector<StashEntry>& entries = stash_layouts_[c];
    entries = stash_entries(*s, chunk);
    stash_estimate_[c] = std::max(stash_estimate_[c], bytes_of(entries));
    return_placeholder(chunk);
  }
  return Status::success();
}

Status PipelineExecutor::setup_offload() {
  const OffloadConfig& config = settings_.offload;
  if (config.tier == OffloadTier::none) return Status::success();
  std::unique_ptr<offload::Tier> tier;
  switch (config.tier) {
    case OffloadTier::host: {
      SPW_ASSIGN_OR_RETURN(tier, offload::make_host_tier());
      break;
    }
    case OffloadTier::file: {
      // Staging larger than one stash is never used: size it to the stash, within 4 MiB.
      SPW_ASSIGN_OR_RETURN(std::int64_t per_stash, measure_stash_bytes());
      const std::size_t staging = std::clamp<std::size_t>(
          (static_cast<std::size_t>(per_stash) + 65535) / 65536 * 65536, 65536,
          offload::FileTier::kDefaultStagingBytes);
      SPW_ASSIGN_OR_RETURN(tier, offload::FileTier::create(config.dir, staging));
      break;
    }
    case OffloadTier::peer: {
      // Stashes pile up on early stages (1F1B holds P - p on rank p): lend to the mirror
      // rank of the same replica, whose stage holds few, or to the next replica's same
      // stage when the pipeline has no mirror (one rank, or the middle of an odd one).
      // Under PipeFB the stashes sit on backward ranks only: each borrows from the forward
      // rank of its stage, which keeps none once sent.
      const PipelineLayout& l = layout();
      const int width = l.ranks_in_pipeline();
      int peer = -1;
      const int mirror = l.pipeline_ranks - 1 - pipeline_rank_;
      if (schedule_.placed()) {
        if (schedule_.runs_backward(pipeline_rank_)) {
          peer = replica_ * width + schedule_.forward_rank_of(global_stage(0));
        }
      } else if (mirror != pipeline_rank_) {
        peer = replica_ * width + mirror;
      } else if (l.replicas > 1) {
        peer = ((replica_ + 1) % l.replicas) * width + pipeline_rank_;
      }
      // Sizing the window can fail on one rank (a cap); the window is collective: agree first.
      std::size_t capacity = 0;
      Status sized = [&]() -> Status {
        SPW_ASSIGN_OR_RETURN(auto report, sched::validate(schedule_));
        SPW_ASSIGN_OR_RETURN(std::int64_t per_stash, measure_stash_bytes());
        // Every stash alive at once could be out at once; 4 KiB per stash for alignment.
        capacity = static_cast<std::size_t>(
            report.max_live_stashes[static_cast<std::size_t>(pipeline_rank_)] *
            (per_stash + 4096));
        return Status::success();
      }();
      SPW_TRY(agree_on_status(world_, sized));
      // Collective: every rank reaches this, even one without a partner (peer -1).
      auto made = offload::make_peer_tier(world_, peer, peer < 0 ? 0 : capacity);
      if (!made.ok()) return made.status();
      if (peer < 0 && !schedule_.placed()) {
        return error(StatusCode::invalid_argument,
                     "offload.tier = \"peer\" needs a partner rank, and a one-rank pipeline "
                     "without replicas has none: use offload.tier = \"file\" or more ranks");
      }
      tier = std::move(made).value();
      break;
    }
    case OffloadTier::none: break;
    case OffloadTier::automatic:  // open_pipeline_job puts the plan's tier in its place
      return error(StatusCode::internal,
                   "offload.tier = \"auto\" reached the executor without a planned tier");
  }
  offload::EngineOptions options;
  options.verify = config.verify;
  options.bind_pu = settings_.engine.pu;
  SPW_ASSIGN_OR_RETURN(engine_, offload::OffloadEngine::create(std::move(tier), options));
  // make_room() before each instruction waits for copies in flight by estimates of what the
  // instruction will take; a block's transient workspace is not in them, and on a loaded
  // machine the copies finish later than the plan assumed. An allocation that would pass
  // the cap waits for them here instead of failing the run.
  MemoryLedger::process().set_pressure_handler(this, [this](std::size_t bytes) {
    (void)make_room(bytes);  // a failure here shows as the allocation's own cap error
  });
  return Status::success();
}

Status PipelineExecutor::offload(int mb, int chunk) {
  SPW_ASSIGN_OR_RETURN(Slot * s, slot(chunk, mb));
  s->transfer_started = now();
  SPW_TRY(engine_->evict(stash_id(chunk, mb), regions_of(stash_tensors(*s, chunk))));
  s->residency = Slot::Residency::evicting;
  evicting_.push_back({chunk, mb});
  return Status::success();
}

// Once a stash's copy is out, its memory is given back. A copy that failed leaves the
// stash resident: its memory was never released, so nothing is lost and the cap still
// holds; the run goes on with it in memory. Nothing here fails.
void PipelineExecutor::settle_eviction(Slot& s, int chunk, int mb, bool block) {
  if (s.residency != Slot::Residency::evicting) return;
  const std::uint64_t id = stash_id(chunk, mb);
  if (!block && !engine_->done(id)) return;
  const Status copied = engine_->wait(id);
  const double end = now();
  record(TraceTrack::offload, sched::Instruction::offload(mb, chunk), 0, s.transfer_started, end);
  if (!copied.ok()) {
    ++failed_evictions_;
    s.residency = Slot::Residency::resident;
    return;
  }
  // The memory goes to the chunk's spare, where the next forward or prefetch finds it
  // mapped: every microbatch of a chunk has the same stash layout.
  s.offloaded = stash_entries(s, chunk);
  std::int64_t bytes = 0;
  for (const StashEntry& e : s.offloaded) {
    Stash& stash = stash_holding(s, e);
    bytes += static_cast<std::int64_t>(stash.at(e.index).bytes());
    stash.give_back(e.index);
  }
  if (tracing_ && !trace_.empty() && trace_.back().instruction.op == sched::Op::offload) {
    trace_.back().bytes = bytes;
  }
  s.residency = Slot::Residency::offloaded;
}

// Under a memory cap, an allocation that would not fit first frees the spares' memory (the
// ledger counts it, and the cap is on what is held, not what is in use), then waits for
// stashes still being copied out to finish and free theirs, oldest first; it fails only
// when nothing is left to wait for. Without a cap nothing waits. `bytes` counts what the
// spares would serve too, so a tight cap gives up recycling before it makes anything wait.
Status PipelineExecutor::make_room(std::size_t bytes) {
  MemoryLedger& ledger = MemoryLedger::process();
  const std::optional<std::size_t> cap = ledger.cap();
  if (!engine_ || !cap) return Status::success();
  // Finished slots whose sends completed since the last instruction give memory back too.
  SPW_TRY(reclaim_retired());
  // Not knowing the size yet (nothing measured), assume the worst: wait for everything.
  const auto tight = [&] { return bytes == 0 || ledger.current_total() + bytes > *cap; };
  if (tight()) drop_spares();
  while (!evicting_.empty() && tight()) {
    const auto [chunk, mb] = evicting_.front();
    evicting_.erase(evicting_.begin());
    Slot* s = active_[static_cast<std::size_t>(chunk)][static_cast<std::size_t>(mb)];
    if (s == nullptr) continue;
    const double start = now();
    settle_eviction(*s, chunk, mb, /*block=*/true);
    drop_spares();  // what the eviction gave back
    current_.offload_wait_s += now() - start;
  }
  return Status::success();
}

void PipelineExecutor::drop_spares() {
  for (const auto& kinds : spare_kinds_) {
    for (const auto& kind : kinds) {
      for (Stash* stash : kind) stash->release();
    }
  }
}

// A slot of `chunk` is about to map memory of `kind` its spare lacks. Memory parked that
// nothing takes before then would sit beside it, where a run without spares has it freed:
// every other chunk's (the rank has turned to this one), and, when the spare holds none of
// `kind` at all, the chunk's own of the other kind: the chunk has turned from forwards to
// backwards or back (GPipe's first backward, with a stash parked for the next prefetch; a
// step's first forwards, with the last backward's gradients). With memory of `kind` still
// parked, the request is one of several (a forward's output after its stash, receives
// posted ahead) and the others take the rest; the other kind stays for what comes next.
//
// Stash memory first looks for evictions of the chunk that have finished since the last
// instruction: their memory goes to the spare, where this request then finds it. A forward
// allocates its stash block by block while the previous microbatch's eviction is still
// copying out; without this it would map the whole stash anew and hold it beside the
// evicted one, and at GPipe's last forward, with the first backward's stash already coming
// back, a rank held three stashes at once where two and a few blocks suffice.
void PipelineExecutor::before_mapping(int chunk, int kind) {
  const auto c = static_cast<std::size_t>(chunk);
  if (kind == kStashMemory) settle_finished_evictions(chunk);
  for (std::size_t other = 0; other < spare_kinds_.size(); ++other) {
    if (other == c) continue;
    for (const auto& stashes : spare_kinds_[other]) {
      for (Stash* stash : stashes) stash->release();
    }
  }
  const auto& own = spare_kinds_[c][static_cast<std::size_t>(kind)];
  if (std::any_of(own.begin(), own.end(), [](const Stash* s) { return s->bytes() > 0; })) return;
  for (Stash* stash : spare_kinds_[c][static_cast<std::size_t>(1 - kind)]) stash->release();
}

Status PipelineExecutor::prefetch(int mb, int chunk) {
  SPW_ASSIGN_OR_RETURN(Slot * s, slot(chunk, mb));
  settle_eviction(*s, chunk, mb, /*block=*/true);
  if (s->residency != Slot::Residency::offloaded) return Status::success();
  SPW_TRY(make_room(bytes_of(s->offloaded)));
  // Give the stash its memory back, tensor by tensor in eviction order, then fill it: the
  // spare's where it has them (mapped already), else new. The engine overwrites every byte:
  // zeroing new memory first would only cost this thread's time.
  std::vector<Tensor*> targets;
  for (const StashEntry& e : s->offloaded) {
    SPW_ASSIGN_OR_RETURN(Tensor * t, stash_holding(*s, e).get(e.index, e.shape, FirstTouch::none));
    targets.push_back(t);
  }
  s->offloaded.clear();
  s->transfer_started = now();
  SPW_TRY(engine_->prefetch(stash_id(chunk, mb), regions_of(targets)));
  s->residency = Slot::Residency::prefetching;
  return Status::success();
}

// Before B or W touches a stash: wait for it to be back, fetching it now if no prefetch
// was scheduled early enough. The wait is the offload's cost the schedule did not hide.
Status PipelineExecutor::ensure_resident(Slot& s, int chunk, int mb) {
  if (s.residency == Slot::Residency::resident) return Status::success();
  if (s.residency != Slot::Residency::prefetching) SPW_TRY(prefetch(mb, chunk));
  if (s.residency != Slot::Residency::prefetching) return Status::success();
  const double start = now();
  const Status back = engine_->wait(stash_id(chunk, mb));
  const double end = now();
  current_.offload_wait_s += end - start;
  record(TraceTrack::offload, sched::Instruction::prefetch(mb, chunk), 0, s.transfer_started, end);
  if (!back.ok()) {
    return back.with_context("bringing back the stash of microbatch " + std::to_string(mb));
  }
  s.residency = Slot::Residency::resident;
  return Status::success();
}

OffloadTotals PipelineExecutor::offload_totals() const {
  OffloadTotals totals;
  if (!engine_) return totals;
  totals.tier = engine_->tier().name();
  totals.engine = engine_->stats();
  totals.transfers = engine_->transfers();
  totals.failed_evictions = failed_evictions_;
  totals.engine_pu = engine_->bound_pu();
  totals.engine_shares_core = engine_shares_core(engine_->cpus(), settings_.engine.compute_pus);
  totals.engine_binding =
      engine_->binding_note().empty() ? settings_.engine.why : engine_->binding_note();
  return totals;
}

std::size_t PipelineExecutor::bytes_held(const Slot& s) {
  std::size_t bytes = s.acts.bytes() + s.grads.bytes();
  for (const BlockState& state : s.states) bytes += state.saved.bytes() + state.grads.bytes();
  return bytes;
}

std::int64_t PipelineExecutor::stash_bytes(int chunk) const {
  const auto c = static_cast<std::size_t>(chunk);
  std::size_t largest = c < largest_retired_slot_.size() ? largest_retired_slot_[c] : 0;
  for (const auto& s : slots_[c]) largest = std::max(largest, bytes_held(*s));
  return static_cast<std::int64_t>(largest);
}

std::int64_t PipelineExecutor::parameter_bytes(int chunk) {
  std::int64_t bytes = 0;
  for (const auto& p : chunks_[static_cast<std::size_t>(chunk)]->parameters()) {
    bytes += static_cast<std::int64_t>(p.value->bytes());
  }
  return bytes;
}

Status PipelineExecutor::load_microbatches() {
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
      SPW_TRY(data_->fill(step_, first, micro, settings_.train.batch, buffers_[i]));
      mb = buffers_[i].view(micro, positions);
    } else {
      mb.samples = micro;
      mb.seq = positions;
    }
    mb.grad_scale = scale;
    microbatches_[i] = mb;
  }
  return Status::success();
}

// Retired slots whose sends have finished go back to the pool (and, with offload, give
// their memory back): checked whenever a slot is needed and between instructions.
Status PipelineExecutor::reclaim_retired() {
  for (std::size_t i = 0; i < retiring_.size();) {
    auto [owner, candidate] = retiring_[i];
    int done = 1;
    if (!candidate->sends.empty()) {
      SPW_TRY(mpi_check(MPI_Testall(static_cast<int>(candidate->sends.size()),
                                    candidate->sends.data(), &done, MPI_STATUSES_IGNORE),
                        "completing sends"));
    }
    if (done) {
      candidate->sends.clear();
      release_if_offloading(*candidate);
      free_slots_[static_cast<std::size_t>(owner)].push_back(candidate);
      retiring_.erase(retiring_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  return Status::success();
}

Result<PipelineExecutor::Slot*> PipelineExecutor::slot(int chunk, int mb) {
  const auto c = static_cast<std::size_t>(chunk);
  Slot*& active = active_[c][static_cast<std::size_t>(mb)];
  if (active != nullptr) return active;
  SPW_TRY(reclaim_retired());
  if (free_slots_[c].empty()) {
    auto fresh = std::make_unique<Slot>();
    fresh->states.resize(chunks_[c]->size());
    if (!spares_.empty()) {
      Slot& spare = *spares_[c];
      const auto& on_miss = on_miss_[c];
      fresh->acts.recycle_from(&spare.acts, &on_miss[kStashMemory]);
      fresh->grads.recycle_from(&spare.grads, &on_miss[kGradientBuffers]);
      for (std::size_t b = 0; b < fresh->states.size(); ++b) {
        fresh->states[b].saved.recycle_from(&spare.states[b].saved, &on_miss[kStashMemory]);
        fresh->states[b].grads.recycle_from(&spare.states[b].grads, &on_miss[kGradientBuffers]);
      }
    }
    free_slots_[c].push_back(fresh.get());
    slots_[c].push_back(std::move(fresh));
  }
  active = free_slots_[c].back();
  free_slots_[c].pop_back();
  active->weight_done = false;
  active->grad_sent = false;
  active->stash_sent = false;
  return active;
}

// Pooled slots keep their memory for the next microbatch, which is what makes steady steps
// allocation-free; with offload that would undo its point, so a finished slot whose sends
// have completed gives its memory back: to the chunk's spare, whose one slot's worth the
// next forward or prefetch takes instead of mapping new pages, and the rest to the OS.
void PipelineExecutor::release_if_offloading(Slot& s) {
  if (!engine_) return;
  s.acts.give_back_all();
  s.grads.give_back_all();
  for (BlockState& state : s.states) {
    state.saved.give_back_all();
    state.grads.give_back_all();
  }
}

// A finished slot of a chunk that runs backwards may wait a long time for its last sends
// (a gradient the previous stage receives late, an output the next stage took long ago):
// when memory is tight (offloading) everything no send can read goes back now. Sends read
// only the chunk's output (SendAct) and its input gradient (SendGrad).
void PipelineExecutor::release_unsent(Slot& s, int chunk) {
  if (!engine_ || !runs_backward(chunk)) return;
  const std::size_t output = chunks_[static_cast<std::size_t>(chunk)]->size();
  for (std::size_t i = 0; i < s.acts.slot_count() && i < output; ++i) s.acts.give_back(i);
  for (std::size_t i = 1; i < s.grads.slot_count(); ++i) s.grads.give_back(i);
  for (BlockState& state : s.states) {
    state.saved.give_back_all();
    state.grads.give_back_all();
  }
}

// A forward-only chunk runs ahead of its backward rank and holds each stash until that rank
// takes it: keep at most sched::kForwardStashesWaiting waiting, so the forward rank's memory
// is bounded (and planned) however far behind the backward rank runs.
Status PipelineExecutor::wait_for_stashes_taken(int chunk) {
  SPW_TRY(reclaim_retired());
  int waiting = 0;
  for (const auto& [owner, s] : retiring_) waiting += owner == chunk ? 1 : 0;
  if (waiting <= sched::kForwardStashesWaiting) return Status::success();
  const double start = now();
  for (auto& [owner, s] : retiring_) {
    if (owner != chunk) continue;
    SPW_TRY(waitall(s->sends, "sending a stash to the stage's backward rank"));
    if (--waiting <= sched::kForwardStashesWaiting) break;
  }
  current_.recv_wait_s += now() - start;
  return reclaim_retired();
}

Status PipelineExecutor::retire_if_done(int chunk, int mb) {
  Slot*& active = active_[static_cast<std::size_t>(chunk)][static_cast<std::size_t>(mb)];
  if (active == nullptr) {
    return error(StatusCode::internal, "no slot for microbatch " + std::to_string(mb) +
                                           " of chunk " + std::to_string(chunk));
  }
  const int stage = global_stage(chunk);
  if (runs_backward(chunk)) {
    const bool sends_grad = stage > 0 && schedule_.backward_rank_of(stage - 1) != pipeline_rank_;
    if (!active->weight_done || (sends_grad && !active->grad_sent)) return Status::success();
  } else if (!active->stash_sent) {
    return Status::success();
  }
  if (largest_retired_slot_.size() <= static_cast<std::size_t>(chunk))
    largest_retired_slot_.resize(static_cast<std::size_t>(chunk) + 1, 0);
  std::size_t& largest = largest_retired_slot_[static_cast<std::size_t>(chunk)];
  largest = std::max(largest, bytes_held(*active));
  release_unsent(*active, chunk);
  retiring_.push_back({chunk, active});
  active = nullptr;
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
  for (std::size_t b = 0; b < model.size(); ++b) {
    Block& block = model.block(b);
    const Shape shape = block.output_shape(data);
    Tensor* output = nullptr;
    if (shape.rank() > 0) {  // the loss block hands on nothing
      SPW_ASSIGN_OR_RETURN(output, s->acts.get(b + 1, shape));
    }
    double loss = 0;
    SPW_TRY(block.forward(data, b == 0 ? input : &s->acts.at(b), output, s->states[b], &loss));
    if (block.computes_loss()) losses_[static_cast<std::size_t>(mb)] = loss;
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
  if (grads_stale_[static_cast<std::size_t>(chunk)]) {
    model.zero_grads();
    grads_stale_[static_cast<std::size_t>(chunk)] = false;
  }
  for (std::size_t b = model.size(); b-- > 0;) {
    const Tensor* block_input = b == 0 ? input : &s->acts.at(b);
    const Tensor* block_doutput = b + 1 == model.size() ? doutput : &s->grads.at(b + 1);
    SPW_TRY(model.block(b).backward_weight(data, block_input, block_doutput, s->states[b]));
    SPW_TRY(poke_communication());
  }
  s->weight_done = true;
  return retire_if_done(chunk, mb);
}

int PipelineExecutor::tag_of(const sched::Transfer& transfer) const {
  // Unique per (payload, microbatch, stage) within a step; parameters carry mb = -1.
  return ((transfer.mb + 1) * layout().stage_count() + transfer.to_stage) * 4 +
         static_cast<int>(transfer.payload);
}

Result<std::int64_t> PipelineExecutor::send(const sched::Instruction& in) {
  SPW_ASSIGN_OR_RETURN(sched::Transfer transfer,
                       sched::transfer_of(schedule_, *stages_, pipeline_rank_, in));
  SPW_ASSIGN_OR_RETURN(Slot * s, slot(in.chunk, in.mb));
  const Tensor* data = nullptr;
  if (in.op == sched::Op::send_act) {
    data = &s->acts.at(chunks_[static_cast<std::size_t>(in.chunk)]->size());
  } else {
    data = &s->grads.at(0);
  }
  SPW_ASSIGN_OR_RETURN(int count, element_count(*data));
  MPI_Request request = MPI_REQUEST_NULL;
  // MPI_Isend's buffer is const void* since MPI-3.
  SPW_TRY(mpi_check(MPI_Isend(data->data(), count, MPI_FLOAT, in.peer, tag_of(transfer),
                              pipeline_comm_, &request),
                    "sending to the next pipeline rank"));
  s->sends.push_back(request);
  if (in.op == sched::Op::send_grad) {
    s->grad_sent = true;
    SPW_TRY(retire_if_done(in.chunk, in.mb));
  }
  return static_cast<std::int64_t>(data->bytes());
}

// A stash or a chunk's parameters travel as one message per tensor under one tag: MPI
// matches messages of one sender, tag and communicator in order, and both ends list the
// tensors in the same order (stash_tensors() and the learnt layout; the chunk's parameters).
Result<std::int64_t> PipelineExecutor::send_stash(const sched::Instruction& in) {
  SPW_ASSIGN_OR_RETURN(sched::Transfer transfer,
                       sched::transfer_of(schedule_, *stages_, pipeline_rank_, in));
  SPW_ASSIGN_OR_RETURN(Slot * s, slot(in.chunk, in.mb));
  std::int64_t bytes = 0;
  for (Tensor* t : stash_tensors(*s, in.chunk)) {
    SPW_ASSIGN_OR_RETURN(int count, element_count(*t));
    MPI_Request request = MPI_REQUEST_NULL;
    SPW_TRY(mpi_check(MPI_Isend(t->data(), count, MPI_FLOAT, in.peer, tag_of(transfer),
                                pipeline_comm_, &request),
                      "sending a stash to the stage's backward rank"));
    s->sends.push_back(request);
    bytes += static_cast<std::int64_t>(t->bytes());
  }
  s->stash_sent = true;
  SPW_TRY(retire_if_done(in.chunk, in.mb));
  return bytes;
}

// Waited for at the end of the step: the next OptimizerStep must not change them in flight.
Result<std::int64_t> PipelineExecutor::send_params(const sched::Instruction& in) {
  SPW_ASSIGN_OR_RETURN(sched::Transfer transfer,
                       sched::transfer_of(schedule_, *stages_, pipeline_rank_, in));
  std::int64_t bytes = 0;
  for (auto& p : chunks_[static_cast<std::size_t>(in.chunk)]->parameters()) {
    SPW_ASSIGN_OR_RETURN(int count, element_count(*p.value));
    MPI_Request request = MPI_REQUEST_NULL;
    SPW_TRY(mpi_check(MPI_Isend(p.value->data(), count, MPI_FLOAT, in.peer, tag_of(transfer),
                                pipeline_comm_, &request),
                      "sending parameters to the stage's forward rank"));
    param_sends_.push_back(request);
    bytes += static_cast<std::int64_t>(p.value->bytes());
  }
  return bytes;
}

// Where a receive lands: the chunk input, the output gradient, a stash laid out as the
// forward rank's, or the chunk's parameters themselves.
Result<std::vector<Tensor*>> PipelineExecutor::receive_buffers(const sched::Instruction& in) {
  std::vector<Tensor*> buffers;
  if (in.op == sched::Op::recv_params) {
    for (auto& p : chunks_[static_cast<std::size_t>(in.chunk)]->parameters()) {
      buffers.push_back(p.value);
    }
    return buffers;
  }
  const auto c = static_cast<std::size_t>(in.chunk);
  if (in.op == sched::Op::recv_stash) SPW_TRY(make_room(bytes_of(stash_layouts_[c])));
  SPW_ASSIGN_OR_RETURN(Slot * s, slot(in.chunk, in.mb));
  Tensor* buffer = nullptr;
  switch (in.op) {
    case sched::Op::recv_act: {
      SPW_ASSIGN_OR_RETURN(buffer, chunk_input(*s, in.chunk, in.mb));
      break;
    }
    case sched::Op::recv_grad: {
      SPW_ASSIGN_OR_RETURN(buffer, chunk_output_grad(*s, in.chunk, in.mb));
      break;
    }
    case sched::Op::recv_stash:
      for (const StashEntry& e : stash_layouts_[c]) {
        Stash& stash = e.block < 0 ? s->acts : s->states[static_cast<std::size_t>(e.block)].saved;
        SPW_ASSIGN_OR_RETURN(Tensor * t, stash.get(e.index, e.shape));
        buffers.push_back(t);
      }
      return buffers;
    default:
      return error(StatusCode::internal, "not a receive: " + sched::to_string(in));
  }
  buffers.push_back(buffer);
  return buffers;
}

// Posts receives up to index `through`. One that sched::posted_when_reached (RecvParams, a
// stash received only to be offloaded) waits until it is the receive being waited for
// (`needed`), and the ones after it with it.
Status PipelineExecutor::post_receives_through(std::size_t through, std::size_t needed) {
  const std::size_t last = std::min(through + 1, receive_positions_.size());
  for (; next_to_post_ < last; ++next_to_post_) {
    const sched::Instruction& in = list_[receive_positions_[next_to_post_]];
    if (sched::posted_when_reached(list_, receive_positions_[next_to_post_]) &&
        next_to_post_ != needed) {
      break;
    }
    SPW_ASSIGN_OR_RETURN(sched::Transfer transfer,
                         sched::transfer_of(schedule_, *stages_, pipeline_rank_, in));
    SPW_ASSIGN_OR_RETURN(std::vector<Tensor*> buffers, receive_buffers(in));
    PostedReceive& posted = posted_[next_to_post_];
    posted.posted_at = now();
    posted.bytes = 0;
    for (Tensor* buffer : buffers) {
      SPW_ASSIGN_OR_RETURN(int count, element_count(*buffer));
      MPI_Request request = MPI_REQUEST_NULL;
      SPW_TRY(mpi_check(MPI_Irecv(buffer->data(), count, MPI_FLOAT, in.peer, tag_of(transfer),
                                  pipeline_comm_, &request),
                        "posting a receive"));
      posted.requests.push_back(request);
      posted.bytes += static_cast<std::int64_t>(buffer->bytes());
    }
  }
  return Status::success();
}

Status PipelineExecutor::receive(const sched::Instruction& in, std::size_t position) {
  const auto it = std::lower_bound(receive_positions_.begin(), receive_positions_.end(), position);
  const auto index = static_cast<std::size_t>(it - receive_positions_.begin());
  SPW_TRY(post_receives_through(index + static_cast<std::size_t>(settings_.receive_lookahead),
                                index));
  const double start = now();
  SPW_TRY(waitall(posted_[index].requests, "receiving from a neighbouring pipeline rank"));
  next_to_receive_ = std::max(next_to_receive_, index + 1);
  const double end = now();
  current_.recv_wait_s += end - start;
  record(TraceTrack::communication, in, posted_[index].bytes, start, end);
  return Status::success();
}

Status PipelineExecutor::reduce_grads(int chunk) {
  const double start = now();
  for (auto& p : chunks_[static_cast<std::size_t>(chunk)]->parameters()) {
    SPW_ASSIGN_OR_RETURN(int count, element_count(*p.grad));
    MPI_Request request = MPI_REQUEST_NULL;
    SPW_TRY(mpi_check(MPI_Iallreduce(MPI_IN_PLACE, p.grad->data(), count, MPI_FLOAT, MPI_SUM,
                                     replica_comm_, &request),
                      "starting the data-parallel gradient all-reduce"));
    reduce_requests_.push_back(request);
  }
  reduces_done_ = false;
  reduce_started_[static_cast<std::size_t>(chunk)] = start;
  if (tracing_) {
    std::int64_t bytes = 0;
    for (auto& p : chunks_[static_cast<std::size_t>(chunk)]->parameters()) {
      bytes += static_cast<std::int64_t>(p.grad->bytes());
    }
    record(TraceTrack::collective, sched::Instruction::reduce_grads(chunk), bytes, start, start);
    reduce_events_.push_back(trace_.size() - 1);
  }
  return Status::success();
}

// Finished evictions of `chunk` (every chunk for -1) give their memory back, without waiting
// for the ones still running.
void PipelineExecutor::settle_finished_evictions(int only_chunk) {
  for (std::size_t i = 0; i < evicting_.size();) {
    const auto [chunk, mb] = evicting_[i];
    if (only_chunk >= 0 && chunk != only_chunk) {
      ++i;
      continue;
    }
    Slot* s = active_[static_cast<std::size_t>(chunk)][static_cast<std::size_t>(mb)];
    if (s != nullptr) settle_eviction(*s, chunk, mb, /*block=*/false);
    if (s == nullptr || s->residency != Slot::Residency::evicting) {
      evicting_.erase(evicting_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
}

// Non-blocking collectives advance only inside MPI calls: test them between instructions.
// Finished evictions give their memory back here too, as soon as they are noticed.
Status PipelineExecutor::progress() {
  if (engine_) SPW_TRY(reclaim_retired());
  settle_finished_evictions(-1);
  if (reduces_done_ || reduce_requests_.empty()) return Status::success();
  int done = 0;
  SPW_TRY(mpi_check(MPI_Testall(static_cast<int>(reduce_requests_.size()),
                                reduce_requests_.data(), &done, MPI_STATUSES_IGNORE),
                    "progressing the gradient all-reduce"));
  if (done) {
    reduces_done_ = true;
    const double end = now();
    for (std::size_t c = 0; c < reduce_started_.size(); ++c) {
      if (reduce_started_[c] < 0) continue;
      ChunkTiming& t = timings_[c];
      t.reduce_s += end - reduce_started_[c];
      t.reduce_samples += 1;
      reduce_started_[c] = -1;
    }
    for (std::size_t e : reduce_events_) trace_[e].end_s = end;
    reduce_events_.clear();
    reduce_requests_.clear();
  }
  return Status::success();
}

// A message larger than the eager limit moves only when its receiver is inside MPI: the
// receiver matches the sender's header and pulls the data (single copy), then tells the
// sender. A rank computing a whole stage would hold its neighbour's send, and with it the
// slot that send reads from, for the length of the stage. Testing the next receive between
// blocks runs MPI's progress engine for every pending transfer, ours and the peers'.
Status PipelineExecutor::poke_communication() {
  if (next_to_receive_ >= next_to_post_) return Status::success();
  std::vector<MPI_Request>& requests = posted_[next_to_receive_].requests;
  int done = 0;
  return mpi_check(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done,
                               MPI_STATUSES_IGNORE),
                   "progressing point-to-point transfers");
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
  return optimizer_->step();
}

Status PipelineExecutor::finish_sends() {
  SPW_TRY(waitall(param_sends_, "sending parameters to the stage's forward rank"));
  for (auto& [chunk, s] : retiring_) {
    SPW_TRY(waitall(s->sends, "completing sends"));
    release_if_offloading(*s);
    free_slots_[static_cast<std::size_t>(chunk)].push_back(s);
  }
  retiring_.clear();
  for (std::size_t c = 0; c < active_.size(); ++c) {
    for (std::size_t mb = 0; mb < active_[c].size(); ++mb) {
      if (active_[c][mb] != nullptr) {
        return error(StatusCode::internal,
                     "schedule " + schedule_.name + " left microbatch " + std::to_string(mb) +
                         " of chunk " + std::to_string(c) + " without its weight gradient");
      }
    }
  }
  return Status::success();
}

void PipelineExecutor::record(TraceTrack track, const sched::Instruction& in,
                              std::int64_t bytes, double start, double end) {
  if (!tracing_) return;
  TraceEvent event;
  event.rank = world_rank_;
  event.step = static_cast<int>(step_ + 1);
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

Status PipelineExecutor::start_loss_sum() {
  const std::int64_t micro = layout().microbatch_samples;
  loss_share_ = 0;
  for (double l : losses_) {
    loss_share_ += l * static_cast<double>(micro) / static_cast<double>(settings_.train.batch);
  }
  return mpi_check(MPI_Iallreduce(&loss_share_, &loss_sum_, 1, MPI_DOUBLE, MPI_SUM, world_,
                                  &loss_request_),
                   "summing the step's loss");
}

Status PipelineExecutor::run_step(StepResult& result) {
  step_start_ = now();
  const std::int64_t step = step_ + 1;
  tracing_ = settings_.trace_steps > 0 && step >= settings_.trace_first_step &&
             step < settings_.trace_first_step + settings_.trace_steps;
  // Timings from the first step (allocation, warm-up) are replaced by later ones.
  if (step_ == 1) std::fill(timings_.begin(), timings_.end(), ChunkTiming{});
  current_ = RankStepMetrics{};
  const std::size_t reserved_before = MemoryLedger::process().reserved_total();
  // Zeroed by each chunk's first W (backward_weight), not here: on the first rank this would
  // delay the step's first forward, which every other rank waits for.
  grads_stale_.assign(chunks_.size(), true);
  SPW_TRY(load_microbatches());
  std::fill(losses_.begin(), losses_.end(), 0.0);
  posted_.assign(receive_positions_.size(), PostedReceive{});
  next_to_post_ = 0;
  next_to_receive_ = 0;
  if (!receive_positions_.empty()) {
    SPW_TRY(post_receives_through(static_cast<std::size_t>(settings_.receive_lookahead) - 1,
                                  receive_positions_.size()));
  }
  if (loss_final_after_ < 0) SPW_TRY(start_loss_sum());
  for (std::size_t i = 0; i < list_.size(); ++i) {
    Status status = execute(list_[i], i);
    if (status.ok() && static_cast<std::ptrdiff_t>(i) == loss_final_after_) {
      status = start_loss_sum();
    }
    if (!status.ok()) {
      return status.with_context("step " + std::to_string(step) + ", instruction " +
                                 sched::to_string(list_[i]));
    }
  }
  SPW_TRY(finish_sends());
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
  return Status::success();
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
