// PipelineExecutor's slots and stashes: taking and retiring a (chunk, microbatch) slot,
// learning what a stash holds, and moving stashes to the capacity tier and back.
#include "runtime/pipeline_executor.hpp"

#include <algorithm>
#include <optional>

#include "kernels/memory_ledger.hpp"
#include "offload/file_tier.hpp"
#include "offload/host_tier.hpp"
#include "offload/peer_tier.hpp"
#include "partition/validator.hpp"
#include "runtime/mpi_support.hpp"
#include "runtime/pipeline_executor_slot.hpp"

namespace spw {

namespace {

std::vector<offload::Region> regions_of(const std::vector<Tensor*>& tensors) {
  std::vector<offload::Region> regions;
  for (Tensor* t : tensors) regions.push_back({t->data(), t->bytes()});
  return regions;
}

}  // namespace

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
  for (const StashEntry& e : entries)
    bytes += static_cast<std::size_t>(e.shape.numel()) * sizeof(float);
  return bytes;
}

Stash& PipelineExecutor::stash_holding(Slot& s, const StashEntry& e) {
  return e.block < 0 ? s.acts : s.states[static_cast<std::size_t>(e.block)].saved;
}

std::vector<Tensor*> PipelineExecutor::stash_tensors(Slot& s, int chunk) {
  std::vector<Tensor*> tensors;
  for (const StashEntry& e : stash_entries(s, chunk))
    tensors.push_back(&stash_holding(s, e).at(e.index));
  return tensors;
}

// Runs the first microbatch's forward of `chunk` once on placeholder inputs, into a slot
// the caller reads and then hands back with return_placeholder(): what a stash holds is
// known only once a forward has filled one.
Result<PipelineExecutor::Slot*> PipelineExecutor::placeholder_forward(int chunk) {
  // A training forward: its stash is what is measured and laid out. One that adds to the
  // gradients (the chunked head) adds garbage, which the next step zeroes before its forward.
  SPW_TRY(load_microbatches(*data_, step_, true));
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
    // Forwards alone ship no stash.
    if (!runs_backward(chunk) || schedule_.forward_rank_of(stage) == pipeline_rank_ ||
        settings_.train.inference_only) {
      continue;
    }
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
    if (failed_evictions_++ == 0) first_failed_eviction_ = copied.message();
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
  totals.first_failed_eviction = first_failed_eviction_;
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
      release_if_offloading(*candidate, owner);
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
  active->dropped = false;
  return active;
}

// Pooled slots keep their memory for the next microbatch, which is what makes steady steps
// allocation-free. Where the list offloads a chunk's stashes that would undo its point, so
// there a finished slot whose sends have completed gives its memory back: to the chunk's
// spare, whose one slot's worth the next forward or prefetch takes instead of mapping new
// pages, and the rest to the OS. A chunk the list never offloads keeps pooling: giving its
// slots back frees nothing an offload needs and maps fresh pages every step.
bool PipelineExecutor::gives_slots_back(int chunk) const {
  return engine_ && chunk_offloads_[static_cast<std::size_t>(chunk)];
}

void PipelineExecutor::release_if_offloading(Slot& s, int chunk) {
  if (!gives_slots_back(chunk)) return;
  s.acts.give_back_all();
  s.grads.give_back_all();
  for (BlockState& state : s.states) {
    state.saved.give_back_all();
    state.grads.give_back_all();
  }
}

// A finished slot of a chunk that runs backwards may wait a long time for its last sends
// (a gradient the previous stage receives late, an output the next stage took long ago):
// when memory is tight (the chunk's stashes are offloaded) everything no send can read goes
// back now. Sends read only the chunk's output (SendAct) and its input gradient (SendGrad).
void PipelineExecutor::release_unsent(Slot& s, int chunk) {
  if (!gives_slots_back(chunk) || !runs_backward(chunk)) return;
  const std::size_t output = chunks_[static_cast<std::size_t>(chunk)]->size();
  for (std::size_t i = 0; i < s.acts.slot_count() && i < output; ++i) s.acts.give_back(i);
  for (std::size_t i = 1; i < s.grads.slot_count(); ++i) s.grads.give_back(i);
  for (BlockState& state : s.states) {
    state.saved.give_back_all();
    state.grads.give_back_all();
  }
}

Status PipelineExecutor::retire_if_done(int chunk, int mb) {
  Slot*& active = active_[static_cast<std::size_t>(chunk)][static_cast<std::size_t>(mb)];
  if (active == nullptr) {
    return error(StatusCode::internal, "no slot for microbatch " + std::to_string(mb) +
                                           " of chunk " + std::to_string(chunk));
  }
  const int stage = global_stage(chunk);
  // A dropped stash (an evaluation's forward) waits for no backward, only for its output's
  // send, which retiring waits for.
  if (!active->dropped) {
    if (runs_backward(chunk)) {
      const bool sends_grad =
          stage > 0 && schedule_.backward_rank_of(stage - 1) != pipeline_rank_;
      if (!active->weight_done || (sends_grad && !active->grad_sent)) return Status::success();
    } else if (!active->stash_sent) {
      return Status::success();
    }
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

}  // namespace spw
