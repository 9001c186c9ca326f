// A pipeline schedule as data: for every rank of one pipeline, the ordered list of
// instructions it executes in one training iteration. Generators write these lists, the
// validator proves them, the simulator times them and the runtime executor interprets them
// over MPI, so everything an executor needs (who sends what to whom, when gradients are
// all-reduced) is spelled out here rather than implied by a schedule's name.
//
// Placement: global stage s in [0, P*v) runs on rank s % P as that rank's local chunk s / P
// (Megatron's interleaved placement; v = 1 gives one contiguous stage per rank).
// Instructions name local chunks; the rank is the list they sit in.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/status.hpp"

namespace spw::sched {

enum class Op : std::uint8_t {
  forward,          // F(mb, chunk)
  backward_input,   // B(mb, chunk): gradient w.r.t. the chunk's input
  backward_weight,  // W(mb, chunk): gradient w.r.t. the chunk's parameters; frees the stash
  send_act,         // output of F(mb, chunk) to the rank of the next stage
  recv_act,         // input of F(mb, chunk) from the rank of the previous stage
  send_grad,        // input gradient from B(mb, chunk) to the rank of the previous stage
  recv_grad,        // output gradient for B(mb, chunk) from the rank of the next stage
  offload,          // move the stash of (mb, chunk) to the capacity tier
  prefetch,         // bring the stash of (mb, chunk) back before its backward
  reduce_grads,     // data-parallel all-reduce of one chunk's gradients (non-blocking)
  optimizer_step,   // waits for every reduce, then updates all local parameters
};

const char* op_name(Op op);
bool is_compute(Op op);  // forward, backward_input, backward_weight
bool is_send(Op op);
bool is_recv(Op op);

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

  friend bool operator==(const Instruction&, const Instruction&) = default;
};

// Short forms: F3.0 B3.0 W3.0 (microbatch.chunk), SA3.0>1 RA3.0<0 SG3.1>0 RG3.0<1 (peer
// rank after the arrow), OF3.0 PF3.0, RD1 (chunk), OPT.
std::string to_string(const Instruction& instruction);

struct Schedule {
  std::string name;
  int ranks = 1;               // P
  int microbatches = 1;        // m
  int chunks = 1;              // v
  bool data_parallel = false;  // replicas exist: each chunk's gradients get a ReduceGrads
  std::vector<std::vector<Instruction>> lists;  // [rank]

  int stages() const { return ranks * chunks; }
  int stage(int rank, int chunk) const { return chunk * ranks + rank; }
  int rank_of(int stage) const { return stage % ranks; }
  int chunk_of(int stage) const { return stage / ranks; }
};

// One row per rank, instructions in fixed-width columns; for test failure messages.
std::string to_string(const Schedule& schedule);

// What a Send or Receive moves, computed the same way from either end so the two can be
// matched: the activation of `mb` leaving stage from_stage for to_stage = from_stage + 1, or
// the gradient going from from_stage to to_stage = from_stage - 1.
struct Transfer {
  bool gradient = false;
  int mb = -1;
  int from_stage = -1;
  int to_stage = -1;
  friend bool operator==(const Transfer&, const Transfer&) = default;
};

// invalid_argument when the instruction on `rank` is not a send or receive, its chunk or
// microbatch is out of range, the stage it needs does not exist, or peer is not the rank
// holding that stage (a rank never sends to itself). The message names the instruction but
// not the rank; callers add where it sits with Status::with_context.
Result<Transfer> transfer_of(const Schedule& schedule, int rank, const Instruction& instruction);

}  // namespace spw::sched
