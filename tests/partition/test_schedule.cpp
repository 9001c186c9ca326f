// The instruction vocabulary: short forms, placement and how sends meet receives.
#include <gtest/gtest.h>

#include "partition/generators.hpp"
#include "partition/schedule.hpp"

namespace spw::sched {
namespace {

Schedule shape(int ranks, int microbatches, int chunks) {
  Schedule schedule;
  schedule.name = "hand";
  schedule.ranks = ranks;
  schedule.microbatches = microbatches;
  schedule.chunks = chunks;
  schedule.lists.resize(static_cast<std::size_t>(ranks));
  return schedule;
}

// PipeFB's placement for `stages` stages: forwards on rank s, backwards on rank P + s.
Schedule forward_backward(int stages, int microbatches) {
  Schedule schedule = shape(2 * stages, microbatches, 1);
  for (int s = 0; s < stages; ++s) schedule.placement.push_back({s, 0, stages + s, 0});
  return schedule;
}

std::string message(const Result<Transfer>& transfer) {
  return transfer.ok() ? "accepted" : transfer.status().message();
}

TEST(Instruction, ShortForms) {
  EXPECT_EQ(to_string(Instruction::forward(3, 0)), "F3.0");
  EXPECT_EQ(to_string(Instruction::backward_input(2, 1)), "B2.1");
  EXPECT_EQ(to_string(Instruction::backward_weight(2, 1)), "W2.1");
  EXPECT_EQ(to_string(Instruction::send_act(3, 0, 1)), "SA3.0>1");
  EXPECT_EQ(to_string(Instruction::recv_act(3, 0, 0)), "RA3.0<0");
  EXPECT_EQ(to_string(Instruction::send_grad(3, 1, 0)), "SG3.1>0");
  EXPECT_EQ(to_string(Instruction::recv_grad(3, 0, 1)), "RG3.0<1");
  EXPECT_EQ(to_string(Instruction::offload(4, 0)), "OF4.0");
  EXPECT_EQ(to_string(Instruction::prefetch(4, 0)), "PF4.0");
  EXPECT_EQ(to_string(Instruction::reduce_grads(1)), "RD1");
  EXPECT_EQ(to_string(Instruction::optimizer_step()), "OPT");
  EXPECT_EQ(to_string(Instruction::send_stash(3, 0, 2)), "SS3.0>2");
  EXPECT_EQ(to_string(Instruction::recv_stash(3, 0, 0)), "RS3.0<0");
  EXPECT_EQ(to_string(Instruction::send_params(0, 0)), "SP0>0");
  EXPECT_EQ(to_string(Instruction::recv_params(0, 2)), "RP0<2");
}

TEST(Instruction, StashAndParameterTransfersAreSendsAndReceives) {
  EXPECT_TRUE(is_send(Op::send_stash));
  EXPECT_TRUE(is_send(Op::send_params));
  EXPECT_TRUE(is_recv(Op::recv_stash));
  EXPECT_TRUE(is_recv(Op::recv_params));
  EXPECT_FALSE(is_compute(Op::recv_stash));
  EXPECT_FALSE(is_send(Op::recv_params));
  EXPECT_STREQ(op_name(Op::send_stash), "SendStash");
  EXPECT_STREQ(op_name(Op::recv_params), "RecvParams");
  // Parameters belong to a chunk, not a microbatch.
  EXPECT_EQ(Instruction::send_params(1, 4), (Instruction{Op::send_params, -1, 1, 4}));
  EXPECT_FALSE(uses_microbatch(Op::recv_params));
  EXPECT_TRUE(uses_microbatch(Op::recv_stash));
  EXPECT_TRUE(uses_chunk(Op::send_params));
  EXPECT_FALSE(uses_chunk(Op::optimizer_step));
}

TEST(Instruction, UnusedFieldsAreMinusOneSoEqualityMeansSameWork) {
  EXPECT_EQ(Instruction::reduce_grads(1), (Instruction{Op::reduce_grads, -1, 1, -1}));
  EXPECT_EQ(Instruction::forward(1, 0).peer, -1);
  EXPECT_NE(Instruction::forward(1, 0), Instruction::backward_input(1, 0));
  EXPECT_TRUE(is_compute(Op::backward_weight));
  EXPECT_FALSE(is_compute(Op::send_act));
  EXPECT_TRUE(is_send(Op::send_grad));
  EXPECT_TRUE(is_recv(Op::recv_act));
  EXPECT_STREQ(op_name(Op::reduce_grads), "ReduceGrads");
}

TEST(Placement, InterleavedStagesGoRoundRobinOverRanks) {
  const Schedule s = shape(4, 8, 2);
  EXPECT_EQ(s.stages(), 8);
  EXPECT_EQ(s.rank_of(5), 1);
  EXPECT_EQ(s.chunk_of(5), 1);
  EXPECT_EQ(s.stage(1, 1), 5);
  EXPECT_EQ(s.stage(3, 0), 3);
  EXPECT_EQ(s.rank_of(4), 0);  // stage 4 wraps back to the first rank
}

TEST(Placement, ClassicStagesRunBothDirectionsOnOneRankAndChunk) {
  const Schedule s = shape(4, 8, 2);
  EXPECT_FALSE(s.placed());
  EXPECT_EQ(s.placement_of(5), (StagePlacement{1, 1, 1, 1}));
  EXPECT_EQ(s.forward_rank_of(5), 1);
  EXPECT_EQ(s.backward_rank_of(5), 1);
  EXPECT_EQ(s.chunk_of(5, Direction::backward), 1);
  EXPECT_EQ(s.stage_of(1, 1, Direction::forward), 5);
  EXPECT_EQ(s.stage_of(1, 1, Direction::backward), 5);
  EXPECT_EQ(s.chunks_on(3), 2);
  EXPECT_TRUE(s.runs_backward(3));
  EXPECT_TRUE(check_placement(s).ok());
}

TEST(Placement, ForwardBackwardSplitsEachStageOverTwoRanks) {
  const Schedule s = forward_backward(3, 2);
  EXPECT_TRUE(s.placed());
  EXPECT_EQ(s.stages(), 3);
  EXPECT_EQ(s.forward_rank_of(1), 1);
  EXPECT_EQ(s.backward_rank_of(1), 4);
  EXPECT_EQ(s.rank_of(1), 1);  // the forward direction's answer
  EXPECT_EQ(s.chunk_of(1, Direction::forward), 0);
  EXPECT_EQ(s.chunk_of(1, Direction::backward), 0);
  // Chunk 0 of rank 4 is stage 1, but only for backward passes.
  EXPECT_EQ(s.stage(4, 0), 1);
  EXPECT_EQ(s.stage_of(4, 0, Direction::backward), 1);
  EXPECT_EQ(s.stage_of(4, 0, Direction::forward), -1);
  EXPECT_EQ(s.stage_of(1, 0, Direction::backward), -1);
  EXPECT_EQ(s.stage(1, 1), -1);
  for (int rank = 0; rank < 6; ++rank) {
    EXPECT_EQ(s.chunks_on(rank), 1);
    EXPECT_EQ(s.runs_backward(rank), rank >= 3) << rank;
  }
  EXPECT_TRUE(check_placement(s).ok());
}

TEST(Placement, MalformedPlacementsNameTheStage) {
  const auto message_of = [](const Schedule& s) {
    const Status status = check_placement(s);
    return status.ok() ? std::string("accepted") : status.message();
  };
  Schedule out_of_range = forward_backward(2, 1);
  out_of_range.placement[1].backward_rank = 4;
  EXPECT_EQ(message_of(out_of_range), "schedule 'hand': stage 1 backward rank 4 outside [0, 4)");

  Schedule bad_chunk = forward_backward(2, 1);
  bad_chunk.placement[0].forward_chunk = 1;
  EXPECT_EQ(message_of(bad_chunk), "schedule 'hand': stage 0 forward chunk 1 outside [0, 1)");

  Schedule shared = forward_backward(2, 1);
  shared.placement[1].backward_rank = 2;
  EXPECT_EQ(message_of(shared), "schedule 'hand': stage 1 shares chunk 0 of rank 2 with stage 0");

  Schedule two_chunks = shape(1, 1, 2);
  two_chunks.placement = {{0, 0, 0, 1}};
  EXPECT_EQ(message_of(two_chunks),
            "schedule 'hand': stage 0 runs both directions on rank 0 but under chunks 0 and 1");

  Schedule gap = shape(2, 1, 2);
  gap.placement = {{0, 1, 1, 0}};
  EXPECT_EQ(message_of(gap),
            "schedule 'hand': rank 0 holds chunk 1 but not chunk 0 (number a rank's chunks 0, 1, "
            "... without gaps)");
}

// The simulator and validator look stages up through StageIndex; it must answer exactly as
// the schedule's own search, also where a malformed placement makes two stages claim one
// (rank, chunk) (the first stage wins) or names a rank that does not exist.
TEST(Placement, StageIndexAnswersAsTheScheduleDoes) {
  Schedule shared = forward_backward(3, 2);
  shared.placement[2].backward_rank = 3;  // stage 0's backward rank too
  Schedule out_of_range = forward_backward(2, 1);
  out_of_range.placement[1].backward_rank = 9;
  Schedule interleaved_pipefb = shape(4, 2, 2);
  interleaved_pipefb.placement = {{0, 0, 2, 0}, {1, 0, 3, 0}, {0, 1, 2, 1}, {1, 1, 3, 1}};
  const Schedule cases[] = {shape(4, 8, 2), forward_backward(3, 2), shared, out_of_range,
                            interleaved_pipefb};
  for (const Schedule& s : cases) {
    const StageIndex index(s);
    for (int rank = -1; rank <= s.ranks; ++rank) {
      for (int chunk = -1; chunk <= s.chunks; ++chunk) {
        const std::string at = to_string(s) + " rank " + std::to_string(rank) + " chunk " +
                               std::to_string(chunk);
        EXPECT_EQ(index.stage(rank, chunk), s.stage(rank, chunk)) << at;
        for (Direction d : {Direction::forward, Direction::backward})
          EXPECT_EQ(index.stage_of(rank, chunk, d), s.stage_of(rank, chunk, d)) << at;
      }
    }
  }
  EXPECT_EQ(StageIndex(shared).stage(3, 0), 0);
  EXPECT_EQ(StageIndex(interleaved_pipefb).stage_of(3, 1, Direction::backward), 3);
}

TEST(Placement, TheStashArrivesWithTheForwardOrWithRecvStash) {
  const Schedule classic = shape(2, 2, 1);
  EXPECT_TRUE(is_stash_arrival(classic, 1, Instruction::forward(0, 0)));
  EXPECT_FALSE(is_stash_arrival(classic, 1, Instruction::backward_input(0, 0)));
  const Schedule split = forward_backward(2, 2);
  // On a forward-only rank the stash leaves with SendStash; it arrives on the backward rank.
  EXPECT_FALSE(is_stash_arrival(split, 0, Instruction::forward(0, 0)));
  EXPECT_TRUE(is_stash_arrival(split, 2, Instruction::recv_stash(0, 0, 0)));
  EXPECT_FALSE(is_stash_arrival(split, 2, Instruction::recv_grad(0, 0, 3)));
}

TEST(Transfer, BothEndsOfAnActivationNameTheSameTransfer) {
  const Schedule s = shape(4, 8, 2);
  // Stage 3 (rank 3, chunk 0) feeds stage 4 (rank 0, chunk 1).
  auto sent = transfer_of(s, 3, Instruction::send_act(5, 0, 0));
  auto received = transfer_of(s, 0, Instruction::recv_act(5, 1, 3));
  ASSERT_TRUE(sent.ok()) << sent.status().message();
  ASSERT_TRUE(received.ok()) << received.status().message();
  EXPECT_EQ(*sent, *received);
  EXPECT_EQ(*sent, (Transfer{Payload::activation, 5, 3, 4}));
}

TEST(Transfer, GradientsTravelToThePreviousStage) {
  const Schedule s = shape(4, 8, 2);
  auto sent = transfer_of(s, 0, Instruction::send_grad(2, 1, 3));
  auto received = transfer_of(s, 3, Instruction::recv_grad(2, 0, 0));
  ASSERT_TRUE(sent.ok()) << sent.status().message();
  ASSERT_TRUE(received.ok()) << received.status().message();
  EXPECT_EQ(*sent, *received);
  EXPECT_EQ(*sent, (Transfer{Payload::gradient, 2, 4, 3}));
}

TEST(Transfer, RejectsWrongPeerMissingStageAndLocalTransfers) {
  const Schedule s = shape(3, 2, 1);
  auto wrong_peer = transfer_of(s, 0, Instruction::send_act(0, 0, 2));
  ASSERT_FALSE(wrong_peer.ok());
  EXPECT_EQ(wrong_peer.status().message(), "SA0.0>2: peer should be rank 1 (stage 1)");

  auto no_previous = transfer_of(s, 0, Instruction::recv_act(0, 0, 2));
  ASSERT_FALSE(no_previous.ok());
  EXPECT_EQ(no_previous.status().message(), "RA0.0<2: stage 0 has no previous stage");

  auto no_next = transfer_of(s, 2, Instruction::recv_grad(0, 0, 0));
  ASSERT_FALSE(no_next.ok());
  EXPECT_EQ(no_next.status().message(), "RG0.0<0: stage 2 has no next stage");

  auto local = transfer_of(shape(1, 2, 2), 0, Instruction::send_act(0, 0, 0));
  ASSERT_FALSE(local.ok());
  EXPECT_EQ(local.status().message(), "SA0.0>0: stage 1 is on this rank; no transfer");

  auto bad_mb = transfer_of(s, 0, Instruction::send_act(2, 0, 1));
  ASSERT_FALSE(bad_mb.ok());
  EXPECT_EQ(bad_mb.status().message(), "SA2.0>1: microbatch 2 outside [0, 2)");

  EXPECT_FALSE(transfer_of(s, 0, Instruction::forward(0, 0)).ok());
}

TEST(Transfer, StashesGoFromTheForwardRankToTheBackwardRankOfOneStage) {
  const Schedule s = forward_backward(2, 4);
  auto sent = transfer_of(s, 1, Instruction::send_stash(3, 0, 3));
  auto received = transfer_of(s, 3, Instruction::recv_stash(3, 0, 1));
  ASSERT_TRUE(sent.ok()) << sent.status().message();
  ASSERT_TRUE(received.ok()) << received.status().message();
  EXPECT_EQ(*sent, *received);
  EXPECT_EQ(*sent, (Transfer{Payload::stash, 3, 1, 1}));
  EXPECT_STREQ(payload_name(sent->payload), "stash");
}

TEST(Transfer, ParametersGoBackFromTheBackwardRank) {
  const Schedule s = forward_backward(2, 4);
  auto sent = transfer_of(s, 2, Instruction::send_params(0, 0));
  auto received = transfer_of(s, 0, Instruction::recv_params(0, 2));
  ASSERT_TRUE(sent.ok()) << sent.status().message();
  ASSERT_TRUE(received.ok()) << received.status().message();
  EXPECT_EQ(*sent, *received);
  EXPECT_EQ(*sent, (Transfer{Payload::parameters, -1, 0, 0}));
}

TEST(Transfer, ActivationsStayAmongForwardRanksAndGradientsAmongBackwardRanks) {
  const Schedule s = forward_backward(2, 4);
  EXPECT_EQ(*transfer_of(s, 0, Instruction::send_act(1, 0, 1)),
            (Transfer{Payload::activation, 1, 0, 1}));
  EXPECT_EQ(*transfer_of(s, 2, Instruction::recv_grad(1, 0, 3)),
            (Transfer{Payload::gradient, 1, 1, 0}));
  EXPECT_EQ(message(transfer_of(s, 0, Instruction::send_act(1, 0, 3))),
            "SA1.0>3: peer should be rank 1 (stage 1)");
  EXPECT_EQ(message(transfer_of(s, 3, Instruction::send_grad(1, 0, 1))),
            "SG1.0>1: peer should be rank 2 (stage 0)");
}

TEST(Transfer, RejectsStashAndParameterTransfersFromTheWrongEnd) {
  const Schedule s = forward_backward(2, 4);
  EXPECT_EQ(message(transfer_of(s, 2, Instruction::send_stash(0, 0, 0))),
            "SS0.0>0: this rank runs no forward passes of stage 0");
  EXPECT_EQ(message(transfer_of(s, 0, Instruction::send_params(0, 2))),
            "SP0>2: this rank runs no backward passes of stage 0");
  EXPECT_EQ(message(transfer_of(s, 0, Instruction::recv_grad(0, 0, 3))),
            "RG0.0<3: this rank runs no backward passes of stage 0");
  EXPECT_EQ(message(transfer_of(s, 0, Instruction::send_stash(0, 0, 3))),
            "SS0.0>3: peer should be rank 2 (stage 0)");
  EXPECT_EQ(message(transfer_of(s, 0, Instruction::send_stash(4, 0, 2))),
            "SS4.0>2: microbatch 4 outside [0, 4)");
  // Classic placement keeps the stash where it was made.
  EXPECT_EQ(message(transfer_of(shape(2, 2, 1), 0, Instruction::send_stash(0, 0, 0))),
            "SS0.0>0: stage 0 runs both directions on this rank; no transfer");
}

TEST(ScheduleText, OneAlignedRowPerRank) {
  Schedule s = shape(2, 1, 1);
  s.name = "tiny";
  s.lists[0] = {Instruction::forward(0, 0), Instruction::send_act(0, 0, 1),
                Instruction::optimizer_step()};
  s.lists[1] = {Instruction::recv_act(0, 0, 0), Instruction::forward(0, 0)};
  EXPECT_EQ(to_string(s),
            "tiny P=2 m=1 v=1\n"
            "rank 0: F0.0    SA0.0>1 OPT    \n"
            "rank 1: RA0.0<0 F0.0   \n");
  // A placed schedule counts its ranks and stages apart.
  auto pipefb = make_pipefb({1, 1, 1, false});
  ASSERT_TRUE(pipefb.ok()) << pipefb.status().message();
  EXPECT_EQ(to_string(*pipefb),
            "pipefb ranks=2 stages=1 m=1 v=1\n"
            "rank 0: F0.0    SS0.0>1 RP0<1  \n"
            "rank 1: RS0.0<0 B0.0    W0.0    OPT     SP0>0  \n");
}

}  // namespace
}  // namespace spw::sched
