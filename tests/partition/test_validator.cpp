// Broken lists are rejected with a message naming the rank, the position and the
// instruction; the stash counts match what each schedule is known to hold.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "partition/generators.hpp"
#include "partition/validator.hpp"
#include "validation_test_support.hpp"

namespace spw::sched {
namespace {

using I = Instruction;

// 1F1B with P = 2, m = 2:
//   rank 0: F0.0 SA0.0>1 F1.0 SA1.0>1 RG0.0<1 B0.0 W0.0 RG1.0<1 B1.0 W1.0 OPT
//   rank 1: RA0.0<0 F0.0 B0.0 W0.0 SG0.0>0 RA1.0<0 F1.0 B1.0 W1.0 SG1.0>0 OPT
Schedule two_by_two(bool data_parallel = false) { return *make_1f1b({2, 2, 1, data_parallel}); }

void erase(Schedule& s, int rank, const Instruction& in) {
  auto& list = s.lists[static_cast<std::size_t>(rank)];
  const auto it = std::find(list.begin(), list.end(), in);
  ASSERT_NE(it, list.end()) << to_string(in);
  list.erase(it);
}

void insert(Schedule& s, int rank, std::size_t at, const Instruction& in) {
  auto& list = s.lists[static_cast<std::size_t>(rank)];
  list.insert(list.begin() + static_cast<std::ptrdiff_t>(at), in);
}

TEST(Validator, AcceptsTheHandWrittenCase) {
  auto report = validate(two_by_two());
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_EQ(report->max_live_stashes, (std::vector<int>{2, 1}));
  EXPECT_EQ(report->max_resident_stashes, (std::vector<int>{2, 1}));
}

TEST(Validator, MissingReceiveNamesTheForwardThatLacksItsInput) {
  Schedule s = two_by_two();
  erase(s, 1, I::recv_act(0, 0, 0));
  EXPECT_EQ(rejection(s), "rank 1 [0] F0.0: its input has not arrived (no RA0.0<0 before it)");
}

TEST(Validator, MissingGradientReceiveNamesTheBackward) {
  Schedule s = two_by_two();
  erase(s, 0, I::recv_grad(1, 0, 1));
  EXPECT_EQ(rejection(s),
            "rank 0 [7] B1.0: its output gradient has not arrived (no RG1.0<1 before it)");
}

TEST(Validator, SwappedOrderDeadlocksAndEachStuckRankIsNamed) {
  Schedule s = two_by_two();
  // Rank 0 waits for the first gradient before sending the activation that produces it.
  std::swap(s.lists[0][1], s.lists[0][4]);  // F0.0 RG0.0<1 F1.0 SA1.0>1 SA0.0>1 ...
  EXPECT_EQ(rejection(s), "deadlock: rank 0 waits at [1] RG0.0<1; rank 1 waits at [0] RA0.0<0");
}

TEST(Validator, MissingSendDeadlocksTheReceiver) {
  Schedule s = two_by_two();
  erase(s, 1, I::send_grad(1, 0, 0));
  EXPECT_EQ(rejection(s), "deadlock: rank 0 waits at [7] RG1.0<1");
}

TEST(Validator, DuplicatedForwardPointsAtTheFirstOne) {
  Schedule s = two_by_two();
  insert(s, 0, 3, I::forward(1, 0));
  EXPECT_EQ(rejection(s), "rank 0 [3] F1.0: runs twice (first at [2])");
}

TEST(Validator, MissingPassIsReportedOnItsRank) {
  Schedule s = two_by_two();
  erase(s, 1, I::backward_weight(1, 0));
  EXPECT_EQ(rejection(s), "rank 1 [9] OPT: runs before every W pass of chunk 0");
  s.lists[1].pop_back();
  EXPECT_EQ(rejection(s), "rank 1: W1.0 never runs");
}

TEST(Validator, DependenciesOnTheSameRank) {
  Schedule weight_first = two_by_two();
  // rank 1: RA0 F0 B0 SG0 W0 ...; W0 moves ahead of B0 and its send.
  std::swap(weight_first.lists[1][2], weight_first.lists[1][4]);
  EXPECT_EQ(rejection(weight_first), "rank 1 [2] W0.0: runs before B0.0");

  Schedule send_first = two_by_two();
  std::swap(send_first.lists[0][0], send_first.lists[0][1]);
  EXPECT_EQ(rejection(send_first), "rank 0 [0] SA0.0>1: sends before F0.0 produced the data");

  Schedule backward_first;
  backward_first.name = "hand";
  backward_first.lists = {{I::backward_input(0, 0), I::forward(0, 0)}};
  EXPECT_EQ(rejection(backward_first), "rank 0 [0] B0.0: runs before F0.0");
}

TEST(Validator, PeersAndRangesAreChecked) {
  Schedule s = *make_1f1b({3, 1, 1, false});
  s.lists[0][1] = I::send_act(0, 0, 2);
  EXPECT_EQ(rejection(s), "rank 0 [1] SA0.0>2: peer should be rank 1 (stage 1)");

  Schedule t = two_by_two();
  t.lists[0][0] = I::forward(2, 0);
  EXPECT_EQ(rejection(t), "rank 0 [0] F2.0: microbatch outside [0, 2)");
  t.lists[0][0] = I::forward(0, 1);
  EXPECT_EQ(rejection(t), "rank 0 [0] F0.1: chunk outside [0, 1)");
  t.lists[0][0] = Instruction{Op::forward, 0, 0, 1};
  EXPECT_EQ(rejection(t), "rank 0 [0] F0.0: sets a field its operation does not use");

  Schedule u = two_by_two();
  u.lists.pop_back();
  EXPECT_EQ(rejection(u), "schedule '1f1b': 1 lists for 2 ranks");
}

TEST(Validator, ReducesNeedReplicasAndEveryWeightGradient) {
  Schedule no_replicas = two_by_two();
  insert(no_replicas, 0, 10, I::reduce_grads(0));
  EXPECT_EQ(rejection(no_replicas),
            "rank 0 [10] RD0: schedule has no data-parallel replicas to reduce with");

  Schedule early = two_by_two(true);
  // Rank 0 with replicas: ... B1.0 W1.0 RD0 OPT; reduce before the last W instead.
  std::swap(early.lists[0][9], early.lists[0][10]);
  EXPECT_EQ(rejection(early), "rank 0 [9] RD0: runs after only 1 of 2 W passes of its chunk");

  Schedule missing = two_by_two(true);
  erase(missing, 0, I::reduce_grads(0));
  EXPECT_EQ(rejection(missing), "rank 0 [10] OPT: runs before RD0");

  Schedule not_last = two_by_two();
  insert(not_last, 0, 0, I::optimizer_step());
  EXPECT_EQ(rejection(not_last), "rank 0 [0] OPT: is not the last instruction of the rank");
}

TEST(Validator, OffloadedStashesMustComeBackBeforeTheirBackward) {
  // GPipe on one rank: F0.0 F1.0 F2.0 B0.0 W0.0 B1.0 W1.0 B2.0 W2.0 OPT.
  Schedule s = *make_gpipe({1, 3, 1, false});
  insert(s, 0, 1, I::offload(0, 0));   // F0.0 OF0.0 F1.0 ...
  insert(s, 0, 3, I::offload(1, 0));   // ... F1.0 OF1.0 F2.0
  insert(s, 0, 5, I::prefetch(0, 0));  // ... F2.0 PF0.0 B0.0
  insert(s, 0, 8, I::prefetch(1, 0));  // ... W0.0 PF1.0 B1.0
  auto report = validate(s);
  ASSERT_TRUE(report.ok()) << report.status().message() << "\n" << to_string(s);
  EXPECT_EQ(report->max_live_stashes, std::vector<int>{3});
  EXPECT_EQ(report->max_resident_stashes, std::vector<int>{2});

  Schedule forgotten = s;
  erase(forgotten, 0, I::prefetch(1, 0));
  EXPECT_EQ(rejection(forgotten), "rank 0 [8] B1.0: its stash is offloaded (no PF1.0 before it)");

  Schedule twice = s;
  insert(twice, 0, 2, I::offload(0, 0));
  EXPECT_EQ(rejection(twice),
            "rank 0 [2] OF0.0: no resident stash to offload (not forwarded, offloaded or freed)");
}

TEST(Validator, OneRankInterleavedNeedsNoTransfers) {
  Schedule s = *make_interleaved_1f1b({1, 2, 2, false});
  for (const Instruction& in : s.lists[0]) EXPECT_FALSE(is_send(in.op) || is_recv(in.op));
  ASSERT_TRUE(validate(s).ok());
  // Chunk 1 on the same rank may not run before chunk 0 produced its input.
  std::swap(s.lists[0][0], s.lists[0][1]);  // F0.1 F0.0 ...
  EXPECT_EQ(rejection(s), "rank 0 [0] F0.1: its input F0.0 has not run");
}

// PipeFB with P = 2 stages, m = 2 (ranks 0, 1 forward; 2, 3 backward):
//   rank 0: F0.0 SA0.0>1 SS0.0>2 F1.0 SA1.0>1 SS1.0>2 RP0<2
//   rank 1: RA0.0<0 F0.0 SS0.0>3 RA1.0<0 F1.0 SS1.0>3 RP0<3
//   rank 2: RS0.0<0 RG0.0<3 B0.0 W0.0 RS1.0<0 RG1.0<3 B1.0 W1.0 OPT SP0>0
//   rank 3: RS0.0<1 B0.0 W0.0 SG0.0>2 RS1.0<1 B1.0 W1.0 SG1.0>2 OPT SP0>1
Schedule forward_backward(bool data_parallel = false) {
  return *make_pipefb({2, 2, 1, data_parallel});
}

TEST(ValidatorPipeFB, BackwardNeedsItsStashFirst) {
  Schedule s = forward_backward();
  erase(s, 3, I::recv_stash(0, 0, 1));
  EXPECT_EQ(rejection(s), "rank 3 [0] B0.0: its stash has not arrived (no RS0.0<1 before it)");

  Schedule late = forward_backward();
  std::swap(late.lists[2][0], late.lists[2][2]);  // B0.0 RG0.0<3 RS0.0<0 ...
  EXPECT_EQ(rejection(late), "rank 2 [0] B0.0: its stash has not arrived (no RS0.0<0 before it)");
}

TEST(ValidatorPipeFB, RecvParamsWithoutSendParamsDeadlocks) {
  Schedule s = forward_backward();
  erase(s, 2, I::send_params(0, 0));
  EXPECT_EQ(rejection(s), "deadlock: rank 0 waits at [6] RP0<2");
}

TEST(ValidatorPipeFB, SendParamsOnlyAfterTheStep) {
  Schedule s = forward_backward();
  std::swap(s.lists[2][8], s.lists[2][9]);  // ... W1.0 SP0>0 OPT
  EXPECT_EQ(rejection(s), "rank 2 [8] SP0>0: sends before OPT updated the parameters");

  Schedule after = forward_backward();
  after.lists[2].push_back(I::backward_weight(1, 0));
  EXPECT_EQ(rejection(after), "rank 2 [8] OPT: is not the last instruction of the rank");
}

TEST(ValidatorPipeFB, ForwardRanksMustGetTheirParametersBack) {
  Schedule neither = forward_backward();
  erase(neither, 0, I::recv_params(0, 2));
  erase(neither, 2, I::send_params(0, 0));
  EXPECT_EQ(rejection(neither),
            "rank 0: never receives stage 0's updated parameters (no RP0<2), so its forwards "
            "would use stale weights");

  Schedule unreceived = forward_backward();
  erase(unreceived, 1, I::recv_params(0, 3));
  EXPECT_EQ(rejection(unreceived), "rank 3 [9] SP0>1: never received");

  Schedule twice = forward_backward();
  twice.lists[0].push_back(I::recv_params(0, 2));
  EXPECT_EQ(rejection(twice), "rank 0 [7] RP0<2: received twice (first at [6])");
}

TEST(ValidatorPipeFB, OnlyBackwardRanksStepAndReduce) {
  Schedule step = forward_backward();
  insert(step, 0, 6, I::optimizer_step());
  EXPECT_EQ(rejection(step),
            "rank 0 [6] OPT: this rank runs no backward passes, so it has no gradients to apply");

  Schedule reduce = forward_backward(true);
  insert(reduce, 1, 6, I::reduce_grads(0));
  EXPECT_EQ(rejection(reduce),
            "rank 1 [6] RD0: chunk 0 runs no backward passes on this rank, so it has no "
            "gradients to reduce");

  Schedule unreduced = forward_backward(true);
  erase(unreduced, 3, I::reduce_grads(0));
  EXPECT_EQ(rejection(unreduced), "rank 3 [8] OPT: runs before RD0");
}

TEST(ValidatorPipeFB, PassesRunWhereThePlacementPutsThem) {
  Schedule forward_on_backward_rank = forward_backward();
  forward_on_backward_rank.lists[3][1] = I::forward(0, 0);
  EXPECT_EQ(rejection(forward_on_backward_rank),
            "rank 3 [1] F0.0: this rank runs no forward passes of stage 1");

  Schedule backward_on_forward_rank = forward_backward();
  insert(backward_on_forward_rank, 0, 1, I::backward_input(0, 0));
  EXPECT_EQ(rejection(backward_on_forward_rank),
            "rank 0 [1] B0.0: this rank runs no backward passes of stage 0");

  Schedule wrong_peer = forward_backward();
  wrong_peer.lists[0][2] = I::send_stash(0, 0, 3);
  EXPECT_EQ(rejection(wrong_peer), "rank 0 [2] SS0.0>3: peer should be rank 2 (stage 0)");

  Schedule shared = forward_backward();
  shared.placement[1].backward_rank = 2;
  EXPECT_EQ(rejection(shared), "schedule 'pipefb': stage 1 shares chunk 0 of rank 2 with stage 0");
}

TEST(ValidatorPipeFB, StashesLeaveResidentAfterTheirForward) {
  Schedule early = forward_backward();
  std::swap(early.lists[0][0], early.lists[0][2]);  // SS0.0>2 SA0.0>1 F0.0 ...
  EXPECT_EQ(rejection(early), "rank 0 [0] SS0.0>2: sends before F0.0 produced the data");

  Schedule offloaded = forward_backward();
  insert(offloaded, 0, 1, I::offload(0, 0));  // F0.0 OF0.0 SA0.0>1 SS0.0>2
  EXPECT_EQ(rejection(offloaded),
            "rank 0 [3] SS0.0>2: its stash is offloaded (no PF0.0 before it)");

  // The backward rank can offload a stash only once it has arrived there.
  Schedule before_arrival = forward_backward();
  insert(before_arrival, 3, 0, I::offload(0, 0));
  EXPECT_EQ(rejection(before_arrival),
            "rank 3 [0] OF0.0: no resident stash to offload (not forwarded, offloaded or freed)");
}

TEST(ValidatorPipeFB, CountsStashesFromArrivalToWeightGradientAndOffloadsThem) {
  // Rank 3 takes both stashes before its first backward and offloads each on arrival:
  //   RS0.0<1 OF0.0 RS1.0<1 OF1.0 PF0.0 B0.0 W0.0 SG0.0>2 PF1.0 B1.0 W1.0 SG1.0>2 OPT SP0>1
  Schedule s = forward_backward();
  s.lists[3] = {I::recv_stash(0, 0, 1), I::offload(0, 0),        I::recv_stash(1, 0, 1),
                I::offload(1, 0),       I::prefetch(0, 0),       I::backward_input(0, 0),
                I::backward_weight(0, 0), I::send_grad(0, 0, 2), I::prefetch(1, 0),
                I::backward_input(1, 0), I::backward_weight(1, 0), I::send_grad(1, 0, 2),
                I::optimizer_step(),    I::send_params(0, 1)};
  auto report = validate(s);
  ASSERT_TRUE(report.ok()) << report.status().message() << "\n" << to_string(s);
  EXPECT_EQ(report->max_live_stashes, (std::vector<int>{1, 1, 1, 2}));
  EXPECT_EQ(report->max_resident_stashes, (std::vector<int>{1, 1, 1, 1}));

  Schedule forgotten = s;
  erase(forgotten, 3, I::prefetch(1, 0));
  EXPECT_EQ(rejection(forgotten), "rank 3 [8] B1.0: its stash is offloaded (no PF1.0 before it)");
}

}  // namespace
}  // namespace spw::sched
