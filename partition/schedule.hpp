// A pipeline schedule as data: for every rank of one pipeline, the ordered list of
// instructions it executes in one training iteration. Generators write these lists, the
// validator proves them, the simulator times them and the runtime executor interprets them
// over MPI, so everything an executor needs (who sends what to whom, when gradients are
// all-reduced) is spelled out here rather than implied by a schedule's name.
//
// Placement: which rank runs a global stage's forwards and which its backwards, and under
// which local chunk index. Instructions name local chunks; the rank is the list they sit in.
//   Classic (Schedule::placement empty): stage s in [0, P*v) runs all its passes on rank
//   s % P as that rank's local chunk s / P (Megatron's interleaved placement; v = 1 gives
//   one contiguous stage per rank).
//   Explicit (one StagePlacement per stage): the forwards and backwards of a stage may sit
//   on different ranks (PipeFB: forward rank F_s = s, backward rank B_s = P + s, both as
//   local chunk 0). A local chunk is one rank's slot for one stage: a (rank, chunk) pair
//   serves at most one stage, in one or both directions, and a rank's chunks are numbered
//   0, 1, ... without gaps. Only a rank that runs a stage's backwards holds its gradients
//   and optimizer state, reduces them and steps; a forward-only rank holds parameters only
//   and receives them back (RecvParams) after the backward rank's step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/status.hpp"

namespace spw::sched {

enum class Op : std::uint8_t {
  forward,          // F(mb, chunk)
  backward_input,   // B(mb, chunk): gradient w.r.t. the chunk's input
  backward_weight,  // W(mb, chunk): gradient w.r.t. the chunk's parameters; frees the stash
  send_act,         // output of F(mb, chunk) to the forward rank of the next stage
  recv_act,         // input of F(mb, chunk) from the forward rank of the previous stage
  send_grad,        // input gradient from B(mb, chunk) to the backward rank of the previous stage
  recv_grad,        // output gradient for B(mb, chunk) from the backward rank of the next stage
  offload,          // move the stash of (mb, chunk) to the capacity tier
  prefetch,         // bring the stash of (mb, chunk) back before its backward
  reduce_grads,     // data-parallel all-reduce of one chunk's gradients (non-blocking)
  optimizer_step,   // waits for every reduce, then updates all local parameters
  send_stash,       // stash of F(mb, chunk) to the stage's backward rank; frees it here
  recv_stash,       // stash for B(mb, chunk) from the stage's forward rank; it lives from here
  send_params,      // the chunk's parameters, updated by OptimizerStep, to its forward rank
  recv_params,      // the chunk's updated parameters from its backward rank; last in the list
  drop_stash,       // frees the stash of F(mb, chunk) unused: an evaluation has no backward
};

const char* op_name(Op op);
bool is_compute(Op op);  // forward, backward_input, backward_weight
bool is_send(Op op);     // send_act, send_grad, send_stash, send_params
bool is_recv(Op op);     // recv_act, recv_grad, recv_stash, recv_params

// Fields an op does not use are -1, so two equal instructions mean the same thing.
struct Instruction {
  Op op = Op::optimizer_step;
  int mb = -1;
  int chunk = -1;
  int peer = -1;  // the other rank of a send or receive

  static Instruction forward(int mb, int chunk) { return {Op::forward, mb, chunk, -1}; }
  static Instruction backward_input(int mb, int chunk) {
    return {Op::backward_input, mb, chunk, -1};
  }
  static Instruction backward_weight(int mb, int chunk) {
    return {Op::backward_weight, mb, chunk, -1};
  }
  static Instruction send_act(int mb, int chunk, int peer) {
    return {Op::send_act, mb, chunk, peer};
  }
  static Instruction recv_act(int mb, int chunk, int peer) {
    return {Op::recv_act, mb, chunk, peer};
  }
  static Instruction send_grad(int mb, int chunk, int peer) {
    return {Op::send_grad, mb, chunk, peer};
  }
  static Instruction recv_grad(int mb, int chunk, int peer) {
    return {Op::recv_grad, mb, chunk, peer};
  }
  static Instruction offload(int mb, int chunk) { return {Op::offload, mb, chunk, -1}; }
  static Instruction prefetch(int mb, int chunk) { return {Op::prefetch, mb, chunk, -1}; }
  static Instruction reduce_grads(int chunk) { return {Op::reduce_grads, -1, chunk, -1}; }
  static Instruction optimizer_step() { return {Op::optimizer_step, -1, -1, -1}; }
  static Instruction send_stash(int mb, int chunk, int peer) {
    return {Op::send_stash, mb, chunk, peer};
  }
  static Instruction recv_stash(int mb, int chunk, int peer) {
    return {Op::recv_stash, mb, chunk, peer};
  }
  static Instruction send_params(int chunk, int peer) {
    return {Op::send_params, -1, chunk, peer};
  }
  static Instruction recv_params(int chunk, int peer) {
    return {Op::recv_params, -1, chunk, peer};
  }
  static Instruction drop_stash(int mb, int chunk) { return {Op::drop_stash, mb, chunk, -1}; }

  friend bool operator==(const Instruction&, const Instruction&) = default;
};

// Whether the op names a microbatch (everything but reduce_grads, optimizer_step and the
// parameter transfers) and a chunk (everything but optimizer_step).
bool uses_microbatch(Op op);
bool uses_chunk(Op op);

// Short forms: F3.0 B3.0 W3.0 (microbatch.chunk), SA3.0>1 RA3.0<0 SG3.1>0 RG3.0<1 SS3.0>2
// RS3.0<0 (peer rank after the arrow), SP0>0 RP0<2 (chunk, peer), OF3.0 PF3.0, DS3.0,
// RD1 (chunk), OPT.
std::string to_string(const Instruction& instruction);

enum class Direction : std::uint8_t { forward, backward };

// Where one global stage runs. Forward passes (F, and the activations in and out) on
// forward_rank as its local chunk forward_chunk; backward passes (B, W, the gradients, the
// reduce and the step) on backward_rank as backward_chunk. When the two ranks are equal the
// chunks are too.
struct StagePlacement {
  int forward_rank = -1;
  int forward_chunk = -1;
  int backward_rank = -1;
  int backward_chunk = -1;
  friend bool operator==(const StagePlacement&, const StagePlacement&) = default;
};

struct Schedule {
  std::string name;
  int ranks = 1;               // ranks in one pipeline, one list each (PipeFB: 2 per stage)
  int microbatches = 1;        // m
  int chunks = 1;              // v: local chunk indices per rank are in [0, v)
  bool data_parallel = false;  // replicas exist: each chunk's gradients get a ReduceGrads
  // An evaluation (make_evaluation): forwards and their activations only, each stash dropped
  // (DropStash) on the rank that made it; no backward, reduce, step or stash transfer.
  bool forward_only = false;
  std::vector<std::vector<Instruction>> lists;  // [rank]
  std::vector<StagePlacement> placement;        // [stage]; empty: classic, see above

  bool placed() const { return !placement.empty(); }
  int stages() const { return placed() ? static_cast<int>(placement.size()) : ranks * chunks; }

  // Where stage `stage` runs; computed from the classic rule when placement is empty.
  StagePlacement placement_of(int stage) const {
    if (placed()) return placement[static_cast<std::size_t>(stage)];
    const int rank = stage % ranks, chunk = stage / ranks;
    return {rank, chunk, rank, chunk};
  }
  int rank_of(int stage, Direction direction) const {
    const StagePlacement p = placement_of(stage);
    return direction == Direction::forward ? p.forward_rank : p.backward_rank;
  }
  int chunk_of(int stage, Direction direction) const {
    const StagePlacement p = placement_of(stage);
    return direction == Direction::forward ? p.forward_chunk : p.backward_chunk;
  }
  int forward_rank_of(int stage) const { return rank_of(stage, Direction::forward); }
  int backward_rank_of(int stage) const { return rank_of(stage, Direction::backward); }

  // The stage local chunk `chunk` of `rank` serves in either direction, or -1 for none.
  int stage(int rank, int chunk) const;
  // The same, but only if the rank runs that direction's passes of the stage; else -1.
  int stage_of(int rank, int chunk, Direction direction) const;
  // Local chunks on `rank` (numbered 0 ..): chunks for a classic schedule.
  int chunks_on(int rank) const;
  // Whether some chunk of `rank` runs backwards: the rank then holds gradients and
  // optimizer state, and its list ends with OptimizerStep (plus any SendParams).
  bool runs_backward(int rank) const;

  // Classic placement only, where a stage has one rank and one chunk; for an explicit
  // placement they answer for the forward direction.
  int rank_of(int stage) const { return rank_of(stage, Direction::forward); }
  int chunk_of(int stage) const { return chunk_of(stage, Direction::forward); }
};

// Schedule::stage and stage_of in constant time, for passes over every instruction (the
// simulator, the validator); the Schedule's own search its placement list. It answers for
// the placement the schedule had when the index was built (keep both alive and unchanged).
// Entries out of range answer -1, as Schedule::stage does for a rank or chunk it lacks.
class StageIndex {
 public:
  explicit StageIndex(const Schedule& schedule);
  int stage(int rank, int chunk) const;
  int stage_of(int rank, int chunk, Direction direction) const;

 private:
  const Schedule* schedule_;
  std::vector<int> stage_;  // [rank * chunks + chunk]; empty for a classic schedule
};

// invalid_argument naming the stage when an explicit placement is malformed: not one entry
// per stage, a rank or chunk out of range, two stages (or a stage's two directions on one
// rank under different chunks) sharing a (rank, chunk), or a rank's chunks not numbered
// 0, 1, ... without gaps. Success for a classic schedule.
Status check_placement(const Schedule& schedule);

// One row per rank, instructions in fixed-width columns; for test failure messages.
std::string to_string(const Schedule& schedule);

// Whether the receive at `position` of `list` is posted only once the rank reaches it,
// instead of receive-lookahead receives ahead (and later receives wait behind it):
// RecvParams, whose buffers are the parameters the forwards still read, and a RecvStash
// directly followed by the Offload of its stash, which the offload pass placed where the
// stash arrives: posted earlier, it would only hold memory for a stash that leaves at once.
bool posted_when_reached(const std::vector<Instruction>& list, std::size_t position);

// Whether the stash of (instruction.mb, instruction.chunk) becomes resident on `rank` with
// this instruction and stays until that rank's W: a Forward on a rank that also runs the
// stage's backwards, or a RecvStash. An offload pass inserts Offload after these (a
// forward-only rank's stash leaves with SendStash and is never offloaded there).
bool is_stash_arrival(const Schedule& schedule, int rank, const Instruction& instruction);

// What a Send or Receive moves, computed the same way from either end so the two can be
// matched:
//   activation  of mb from stage from_stage to to_stage = from_stage + 1 (forward ranks);
//   gradient    of mb from stage from_stage to to_stage = from_stage - 1 (backward ranks);
//   stash       of mb of one stage, from its forward rank to its backward rank;
//   parameters  of one stage (mb -1), from its backward rank to its forward rank.
// For stash and parameters from_stage = to_stage.
enum class Payload : std::uint8_t { activation, gradient, stash, parameters };
inline constexpr std::size_t kPayloads = 4;  // for tables indexed by Payload
const char* payload_name(Payload payload);

struct Transfer {
  Payload payload = Payload::activation;
  int mb = -1;
  int from_stage = -1;
  int to_stage = -1;
  friend bool operator==(const Transfer&, const Transfer&) = default;
};

// invalid_argument when the instruction on `rank` is not a send or receive, its chunk or
// microbatch is out of range, the chunk does not run the direction the transfer belongs to
// on this rank, the stage it needs does not exist, or peer is not the rank holding that
// end (a rank never sends to itself). The message names the instruction but not the rank;
// callers add where it sits with Status::with_context.
Result<Transfer> transfer_of(const Schedule& schedule, int rank, const Instruction& instruction);
// The same with a StageIndex built from `schedule`, for loops over many instructions.
Result<Transfer> transfer_of(const Schedule& schedule, const StageIndex& index, int rank,
                             const Instruction& instruction);

}  // namespace spw::sched
