// PipelineExecutor's MPI traffic: point-to-point sends and early-posted receives, the
// gradient all-reduce across replicas, the step's loss sum, and progressing them all.
#include "runtime/pipeline_executor.hpp"

#include <limits>

#include "partition/simulator.hpp"
#include "runtime/mpi_support.hpp"
#include "runtime/pipeline_executor_slot.hpp"

namespace spw {

namespace {

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

// Starts sending `tensor` and keeps its request in `requests`; returns the bytes under way.
Result<std::int64_t> start_send(const Tensor& tensor, int peer, int tag, MPI_Comm comm,
                                std::vector<MPI_Request>& requests, const char* what) {
  SPW_ASSIGN_OR_RETURN(int count, element_count(tensor));
  MPI_Request request = MPI_REQUEST_NULL;
  // MPI_Isend's buffer is const void* since MPI-3.
  SPW_TRY(mpi_check(MPI_Isend(tensor.data(), count, MPI_FLOAT, peer, tag, comm, &request), what));
  requests.push_back(request);
  return static_cast<std::int64_t>(tensor.bytes());
}

}  // namespace

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
  SPW_ASSIGN_OR_RETURN(std::int64_t bytes,
                       start_send(*data, in.peer, tag_of(transfer), pipeline_comm_, s->sends,
                                  "sending to the next pipeline rank"));
  if (in.op == sched::Op::send_grad) {
    s->grad_sent = true;
    SPW_TRY(retire_if_done(in.chunk, in.mb));
  }
  return bytes;
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
    SPW_ASSIGN_OR_RETURN(std::int64_t sent,
                         start_send(*t, in.peer, tag_of(transfer), pipeline_comm_, s->sends,
                                    "sending a stash to the stage's backward rank"));
    bytes += sent;
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
    SPW_ASSIGN_OR_RETURN(
        std::int64_t sent,
        start_send(*p.value, in.peer, tag_of(transfer), pipeline_comm_, param_sends_,
                   "sending parameters to the stage's forward rank"));
    bytes += sent;
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
  const std::vector<std::size_t>& receives = program_->receive_positions;
  const std::size_t last = std::min(through + 1, receives.size());
  for (; next_to_post_ < last; ++next_to_post_) {
    const sched::Instruction& in = program_->list[receives[next_to_post_]];
    if (sched::posted_when_reached(program_->list, receives[next_to_post_]) &&
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
  const std::vector<std::size_t>& receives = program_->receive_positions;
  const auto it = std::lower_bound(receives.begin(), receives.end(), position);
  const auto index = static_cast<std::size_t>(it - receives.begin());
  SPW_TRY(post_receives_through(index + static_cast<std::size_t>(settings_.receive_lookahead),
                                index));
  SPW_ASSIGN_OR_RETURN(const double zeroing, zero_grads_while_waiting(posted_[index].requests));
  current_.busy_s += zeroing;
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

Status PipelineExecutor::finish_sends() {
  SPW_TRY(waitall(param_sends_, "sending parameters to the stage's forward rank"));
  for (auto& [chunk, s] : retiring_) {
    SPW_TRY(waitall(s->sends, "completing sends"));
    release_if_offloading(*s, chunk);
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

}  // namespace spw
