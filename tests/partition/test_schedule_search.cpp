// Every list two ranks could run, searched exhaustively and timed by the simulator: is
// ZB-H1 the fastest schedule its memory allows, and can any list with that memory keep
// ZB-H1's closed form when one rank runs slower? Issue 4 asks the measured ZB-H1 bubble to
// be no worse than its closed form; these say what the two cores of a real machine, whose
// paces never quite agree, let any schedule do.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <vector>

#include "partition/generators.hpp"
#include "partition/schedule_builder.hpp"
#include "partition/simulator.hpp"

namespace spw::sched {
namespace {

constexpr int kRanks = 2;

struct Proportions {
  double f, b, w;
};

// Every order of F, B and W of m microbatches on one rank that keeps microbatch order
// within each kind, runs B after its F and W after its B, and never holds more than
// `stash_limit` stashes (a stash lives from its F to its W, as the validator counts).
void enumerate_orders(int m, int stash_limit, std::vector<Instruction>& order, int forwards,
                      int backwards, int weights,
                      std::vector<std::vector<Instruction>>& out) {
  if (weights == m) {
    out.push_back(order);
    return;
  }
  const auto extend = [&](const Instruction& in, int f, int b, int w) {
    order.push_back(in);
    enumerate_orders(m, stash_limit, order, f, b, w, out);
    order.pop_back();
  };
  if (forwards < m && forwards - weights < stash_limit)
    extend(Instruction::forward(forwards, 0), forwards + 1, backwards, weights);
  if (backwards < forwards)
    extend(Instruction::backward_input(backwards, 0), forwards, backwards + 1, weights);
  if (weights < backwards)
    extend(Instruction::backward_weight(weights, 0), forwards, backwards, weights + 1);
}

std::vector<std::vector<Instruction>> all_orders(int m, int stash_limit) {
  std::vector<std::vector<Instruction>> out;
  std::vector<Instruction> order;
  enumerate_orders(m, stash_limit, order, 0, 0, 0, out);
  return out;
}

CostModel two_stages(Proportions p, int slower_stage, double slower_by) {
  CostModel costs;
  costs.stages.assign(kRanks, StageCost{});
  for (int stage = 0; stage < kRanks; ++stage) {
    const double pace = stage == slower_stage ? 1 + slower_by : 1;
    StageCost& s = costs.stages[static_cast<std::size_t>(stage)];
    s.forward_s = p.f * pace;
    s.backward_input_s = p.b * pace;
    s.backward_weight_s = p.w * pace;
  }
  return costs;
}

double bubble(const Simulation& s) {
  const double busy = std::accumulate(s.busy_s.begin(), s.busy_s.end(), 0.0);
  return 1 - busy / (static_cast<double>(s.busy_s.size()) * s.iteration_s);
}

struct Best {
  Simulation simulation;
  int candidates = 0;  // pairs that run
  int deadlocks = 0;   // pairs whose ranks would wait for each other forever
};

// The fastest pair of lists whose ranks hold at most stash_limit[r] stashes each.
Best search(int m, const std::vector<int>& stash_limit, const CostModel& costs) {
  const auto first = all_orders(m, stash_limit[0]);
  const auto last = all_orders(m, stash_limit[1]);
  Best best;
  best.simulation.iteration_s = std::numeric_limits<double>::infinity();
  const ScheduleShape shape{kRanks, m, 1, false};
  for (const auto& a : first)
    for (const auto& b : last) {
      const Schedule candidate = lower_compute_order("search", shape, {a, b});
      auto simulated = simulate(candidate, costs);
      if (!simulated.ok()) {
        // The validator refuses them: e.g. rank 0 waiting for B2's gradient before it sends
        // F3's output, rank 1 waiting for that output before it runs B2.
        EXPECT_TRUE(simulated.status().message().starts_with("deadlock: "))
            << simulated.status().message();
        ++best.deadlocks;
        continue;
      }
      for (int r = 0; r < kRanks; ++r)
        EXPECT_LE(simulated->max_live_stashes[static_cast<std::size_t>(r)],
                  stash_limit[static_cast<std::size_t>(r)]);
      ++best.candidates;
      if (simulated->iteration_s < best.simulation.iteration_s) best.simulation = *simulated;
    }
  return best;
}

// ZB-H1's closed form for equal stages of the given costs, as a bubble fraction.
double closed_form_bubble(int m, Proportions p) {
  const double idle = (kRanks - 1) * std::max({p.f, p.b, p.f + p.b - p.w});
  return idle / (m * (p.f + p.b + p.w) + idle);
}

TEST(ScheduleSearch, OrdersAreEveryOrderThatKeepsTheRules) {
  // One stash leaves F B W one microbatch after the other. Two microbatches and two
  // stashes: F0 F1 B0 B1 W0 W1, F0 F1 B0 W0 B1 W1, F0 B0 F1 B1 W0 W1, F0 B0 F1 W0 B1 W1
  // and F0 B0 W0 F1 B1 W1. The larger counts are a separate script's (/tmp/s28/lb.py).
  EXPECT_EQ(all_orders(1, 1).size(), 1u);
  EXPECT_EQ(all_orders(3, 1).size(), 1u);
  const auto two = all_orders(2, 2);
  ASSERT_EQ(two.size(), 5u);
  const std::vector<Instruction> forwards_first{
      Instruction::forward(0, 0),         Instruction::forward(1, 0),
      Instruction::backward_input(0, 0),  Instruction::backward_input(1, 0),
      Instruction::backward_weight(0, 0), Instruction::backward_weight(1, 0)};
  EXPECT_EQ(two.front(), forwards_first);
  EXPECT_EQ(all_orders(3, 2).size(), 21u);
  EXPECT_EQ(all_orders(4, 2).size(), 89u);
  EXPECT_EQ(all_orders(4, 3).size(), 341u);
}

TEST(ScheduleSearch, ZeroBubbleH1IsTheFastestListWithinItsStashes) {
  // ZB-H1 holds at most P stashes on each rank (the first rank's 1F1B peak). With equal
  // stages no pair of lists within that memory ends an iteration sooner, for W below,
  // between and above F and B, so partition/README.md's looser floor, m(F + B + W) +
  // (P - 1) max(F, B), is not reached at this memory: it takes a third stash.
  const std::vector<int> zb_h1_stashes{kRanks, kRanks};
  for (Proportions p : {Proportions{1, 0.92, 0.82}, Proportions{1, 1, 1},
                        Proportions{1, 0.7, 1.2}, Proportions{0.8, 1, 0.9}}) {
    for (int m : {3, 4}) {
      const CostModel costs = two_stages(p, 0, 0);
      auto zb = make_zb_h1({kRanks, m, 1, false});
      ASSERT_TRUE(zb.ok()) << zb.status().message();
      auto zb_time = simulate(*zb, costs);
      ASSERT_TRUE(zb_time.ok()) << zb_time.status().message();
      for (int stashes : zb_time->max_live_stashes) EXPECT_LE(stashes, kRanks);
      const Best best = search(m, zb_h1_stashes, costs);
      EXPECT_GT(best.candidates, 1);
      EXPECT_NEAR(best.simulation.iteration_s, zb_time->iteration_s, 1e-9)
          << "F " << p.f << " B " << p.b << " W " << p.w << " m=" << m;
      EXPECT_NEAR(bubble(*zb_time), closed_form_bubble(m, p), 1e-12);
    }
  }
  // A third stash on each rank (the first runs a third forward before its first gradient
  // comes back, the last defers a second W) ends the iteration (B - W) sooner: that floor.
  // A third on the first rank alone does not.
  const Proportions gpt_s{1, 0.92, 0.82};
  const int m = 4;
  const CostModel equal = two_stages(gpt_s, 0, 0);
  EXPECT_NEAR(search(m, {kRanks + 1, kRanks}, equal).simulation.iteration_s,
              m * (gpt_s.f + gpt_s.b + gpt_s.w) + gpt_s.f + gpt_s.b - gpt_s.w, 1e-9);
  const Best roomier = search(m, {kRanks + 1, kRanks + 1}, equal);
  const double floor = m * (gpt_s.f + gpt_s.b + gpt_s.w) + std::max(gpt_s.f, gpt_s.b);
  EXPECT_NEAR(roomier.simulation.iteration_s, floor, 1e-9);
}

TEST(ScheduleSearch, NoListWithZeroBubbleH1sMemoryMeetsItsClosedFormWhenOneRankRunsSlower) {
  // gpt-s's proportions; the closed form at the two stages' mean costs, as
  // bench/pipeline compares a run with it. A rank 0.5% or 1% slower puts the best list
  // within ZB-H1's stashes over it (at m = 4: 0.08 / 0.12 points at 0.5% with the first /
  // the last rank slower, 0.16 / 0.25 at 1%); with a third stash on each rank the best list
  // stays 1.14 / 0.38 points under it at 1%. Longer lists cannot be searched whole; the
  // simulator test ZeroBubbleH1HasNoSlackForAStageThatRunsSlower has ZB-H1 at m = 16.
  const Proportions gpt_s{1, 0.92, 0.82};
  const int m = 4;
  for (double slower_by : {0.005, 0.01})
    for (int slower_stage : {0, 1}) {
      const CostModel costs = two_stages(gpt_s, slower_stage, slower_by);
      const double mean_pace = 1 + slower_by / kRanks;
      const Proportions mean{gpt_s.f * mean_pace, gpt_s.b * mean_pace, gpt_s.w * mean_pace};
      const double closed = closed_form_bubble(m, mean);
      const Best within = search(m, {kRanks, kRanks}, costs);
      EXPECT_GT(bubble(within.simulation) - closed, 0.1 * slower_by)
          << "stage " << slower_stage << " " << slower_by * 100 << "% slower";
      if (slower_by == 0.01) {
        const Best roomier = search(m, {kRanks + 1, kRanks + 1}, costs);
        EXPECT_LT(bubble(roomier.simulation), closed)
            << "stage " << slower_stage << " 1% slower, three stashes";
      }
    }
}

}  // namespace
}  // namespace spw::sched
