// The instruction vocabulary: short forms, placement and how sends meet receives.
#include <gtest/gtest.h>

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

TEST(Transfer, BothEndsOfAnActivationNameTheSameTransfer) {
  const Schedule s = shape(4, 8, 2);
  // Stage 3 (rank 3, chunk 0) feeds stage 4 (rank 0, chunk 1).
  auto sent = transfer_of(s, 3, Instruction::send_act(5, 0, 0));
  auto received = transfer_of(s, 0, Instruction::recv_act(5, 1, 3));
  ASSERT_TRUE(sent.ok()) << sent.status().message();
  ASSERT_TRUE(received.ok()) << received.status().message();
  EXPECT_EQ(*sent, *received);
  EXPECT_EQ(*sent, (Transfer{false, 5, 3, 4}));
}

TEST(Transfer, GradientsTravelToThePreviousStage) {
  const Schedule s = shape(4, 8, 2);
  auto sent = transfer_of(s, 0, Instruction::send_grad(2, 1, 3));
  auto received = transfer_of(s, 3, Instruction::recv_grad(2, 0, 0));
  ASSERT_TRUE(sent.ok()) << sent.status().message();
  ASSERT_TRUE(received.ok()) << received.status().message();
  EXPECT_EQ(*sent, *received);
  EXPECT_EQ(*sent, (Transfer{true, 2, 4, 3}));
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
}

}  // namespace
}  // namespace spw::sched
