// The planner against exhaustive search on small random cases, and its behaviour where the
// answer is known: memory caps, topology-aware mapping, errors, and the bound it prunes with.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "partition/generators.hpp"
#include "partition/offload_pass.hpp"
#include "partition/planner.hpp"
#include "partition/planner_bound.hpp"
#include "partition/planner_split.hpp"
#include "partition/planner_test_support.hpp"

namespace spw::sched {
namespace {

ModelProfile random_profile(std::mt19937_64& rng, int blocks) {
  std::uniform_real_distribution<double> time(0.05, 1.0);
  std::uniform_int_distribution<std::int64_t> bytes(1, 64);
  ModelProfile p;
  p.microbatch_samples = std::uniform_int_distribution<int>(1, 2)(rng);
  p.optimizer_step_s = std::uniform_int_distribution<int>(0, 1)(rng) * time(rng);
  for (int i = 0; i < blocks; ++i) {
    BlockProfile b;
    b.name = "block" + std::to_string(i);
    b.forward_s = time(rng);
    b.backward_input_s = time(rng);
    b.backward_weight_s = time(rng) * std::uniform_int_distribution<int>(0, 1)(rng);
    b.stash_bytes = bytes(rng) << 20;
    b.activation_bytes = bytes(rng) << 20;
    b.parameter_bytes = bytes(rng) << 20;
    b.gradient_bytes = b.parameter_bytes;
    b.optimizer_state_bytes = 2 * b.parameter_bytes;
    p.blocks.push_back(b);
  }
  return p;
}

// Random directed bandwidths and latencies over 1..max_ranks ranks: transfers cost from
// about as much as a pass to much less.
RankTopology random_topology(std::mt19937_64& rng, int ranks) {
  std::uniform_real_distribution<double> log_bw(std::log(2e7), std::log(2e9));
  std::uniform_real_distribution<double> latency(0, 0.05);
  RankTopology t;
  t.ranks = ranks;
  for (int r = 0; r < ranks; ++r) t.node_of.push_back(r);
  for (int a = 0; a < ranks; ++a)
    for (int b = 0; b < ranks; ++b)
      t.links.push_back(a == b ? Link{} : Link{std::exp(log_bw(rng)), latency(rng)});
  return t;
}

struct Best {
  double iteration_s = std::numeric_limits<double>::infinity();
  std::int64_t smallest_peak = std::numeric_limits<std::int64_t>::max();
  std::int64_t smallest_plain_peak = std::numeric_limits<std::int64_t>::max();  // no offload
  int evaluated = 0;
};

// The schedules a request lets the planner use, PipeFB included where its layout allows.
std::vector<std::string> allowed_schedules(const PlanRequest& q) {
  std::vector<std::string> names;
  if (q.layout != LayoutChoice::pipefb)
    for (const std::string& name : q.schedules)
      if (name != "pipefb") names.push_back(name);
  if (q.layout != LayoutChoice::classic) names.emplace_back("pipefb");
  return names;
}

// Every point of the planner's search space, each simulated, with every offload policy the
// request allows: the reference.
Best brute_force(const PlanRequest& q) {
  Best best;
  const int N = q.topology.ranks, n = static_cast<int>(q.profile.blocks.size());
  const std::int64_t cap = q.memory_cap_bytes.value_or(std::numeric_limits<std::int64_t>::max());
  std::vector<int> identity(static_cast<std::size_t>(N));
  std::iota(identity.begin(), identity.end(), 0);
  for (const std::string& name : allowed_schedules(q)) {
    const bool interleaved = name == "interleaved-1f1b";
    const int per_stage = name == "pipefb" ? 2 : 1;
    for (int P = 1; P <= N; ++P) {
      if (N % (per_stage * P) || q.global_batch % (N / (per_stage * P))) continue;
      const int R = N / (per_stage * P);
      for (int v = interleaved ? 2 : 1; v <= (interleaved ? q.limits.max_chunks : 1); ++v)
        for (int m = 1; m <= q.limits.max_microbatches; ++m) {
          if ((q.global_batch / R) % m || (interleaved && m % P) || P * v > n) continue;
          PipelineLayout l;
          l.schedule = name;
          l.pipeline_ranks = P, l.replicas = R, l.chunks = v, l.microbatches = m;
          l.microbatch_samples = q.global_batch / R / m;
          const auto schedule = make_schedule(name, {P, m, v, R > 1});
          EXPECT_TRUE(schedule.ok()) << schedule.status().message();
          // Every distinct policy: keep below the first that offloads nothing.
          std::vector<std::pair<OffloadChoice, Schedule>> variants{{{}, *schedule}};
          if (q.offload.choose)
            for (OffloadTier tier : q.offload.tiers)
              for (int keep = 0; keep < offload_keep_limit(*schedule); ++keep)
                for (int lookahead = 0; lookahead <= q.limits.max_lookahead; ++lookahead)
                  variants.push_back(
                      {{tier, keep, lookahead}, *insert_offload(*schedule, {keep, lookahead})});
          const BlockSums blocks = scale_blocks(q.profile, l.microbatch_samples);
          for (const auto& stages : all_partitions(n, P * v, 1 << 30)) {
            l.stages = stages;
            std::vector<int> world = identity;
            do {
              l.world_rank = world;
              for (const auto& [offload, offloaded] : variants) {
                l.offload = offload;
                if (!check_layout(q.profile, q.topology, l).ok()) continue;  // peer, no partner
                const auto p =
                    predict(offloaded, blocks, q.topology, l, false, q.offload.bandwidth);
                EXPECT_TRUE(p.ok()) << p.status().message();
                ++best.evaluated;
                const std::int64_t peak =
                    *std::max_element(p->peak_memory_bytes.begin(), p->peak_memory_bytes.end());
                best.smallest_peak = std::min(best.smallest_peak, peak);
                if (offload.tier == OffloadTier::none)
                  best.smallest_plain_peak = std::min(best.smallest_plain_peak, peak);
                if (peak <= cap) best.iteration_s = std::min(best.iteration_s, p->iteration_s);
              }
            } while (std::next_permutation(world.begin(), world.end()));
          }
        }
    }
  }
  return best;
}

struct PropertyCounts {
  int capped = 0, infeasible = 0, simulations = 0, evaluated = 0, offloaded = 0, split = 0;
};

// Random small requests (<= 8 blocks, <= 4 ranks, random directed links, a third with a cap
// between the smallest peak found and twice it): the planner's plan equals brute force.
// `configure` sets what the trial varies beyond the common draw. `offload_caps`: two thirds
// of the trials get a cap, and where offloading lowers the smallest peak, one that only
// plans with offload meet.
template <class Configure>
PropertyCounts check_against_brute_force(std::uint64_t seed, int trials, Configure configure,
                                         bool offload_caps = false, int max_blocks = 8) {
  std::mt19937_64 rng(seed);
  PropertyCounts counts;
  for (int trial = 0; trial < trials; ++trial) {
    PlanRequest q;
    const int ranks = std::uniform_int_distribution<int>(1, 4)(rng);
    q.profile = random_profile(rng, std::uniform_int_distribution<int>(1, max_blocks)(rng));
    q.topology = random_topology(rng, ranks);
    q.global_batch =
        std::vector<int>{1, 2, 4, 6, 8, 12, 16}[std::uniform_int_distribution<int>(0, 6)(rng)];
    q.limits.max_microbatches = trial % 2 ? 4 : 8;
    q.limits.max_chunks = std::uniform_int_distribution<int>(2, 3)(rng);
    configure(trial, rng, q);
    const Best unconstrained = brute_force(q);
    // No layout at all (no P divides the ranks with R dividing the batch) leaves no peak to
    // draw a cap around: the smallest peak is still the int64 maximum.
    const bool capped = unconstrained.evaluated > 0 &&
                        (offload_caps ? trial % 3 != 0 : trial % 3 == 1);
    const std::int64_t low = unconstrained.smallest_peak;
    if (capped && offload_caps && unconstrained.smallest_plain_peak > low) {
      q.memory_cap_bytes = std::uniform_int_distribution<std::int64_t>(
          low, unconstrained.smallest_plain_peak - 1)(rng);
    } else if (capped) {
      q.memory_cap_bytes = low + std::uniform_int_distribution<std::int64_t>(-low / 8, low)(rng);
    }
    counts.capped += capped;
    const Best reference = capped ? brute_force(q) : unconstrained;
    counts.evaluated += reference.evaluated;
    const auto plan = make_plan(q);
    const std::string what = "trial " + std::to_string(trial) + ": " +
                             std::to_string(q.profile.blocks.size()) + " blocks, " +
                             std::to_string(ranks) + " ranks, batch " +
                             std::to_string(q.global_batch) + ", layout " +
                             std::to_string(static_cast<int>(q.layout));
    if (reference.evaluated == 0) {  // no P divides the ranks with R dividing the batch
      EXPECT_EQ(plan.status().code(), StatusCode::invalid_argument) << what;
      continue;
    }
    if (std::isinf(reference.iteration_s)) {
      ++counts.infeasible;
      EXPECT_FALSE(plan.ok()) << what;
      EXPECT_EQ(plan.status().code(), StatusCode::memory_cap) << what;
      continue;
    }
    EXPECT_TRUE(plan.ok()) << what << ": " << plan.status().message();
    if (!plan.ok()) continue;
    EXPECT_TRUE(plan->exact) << what << "\n" << plan->explanation;
    EXPECT_NEAR(plan->iteration_s, reference.iteration_s, 1e-12 * reference.iteration_s)
        << what << "\n" << plan->explanation;
    // The plan is what it says: simulating its layout again gives its numbers.
    const auto again = predict(q.profile, q.topology, *plan, q.offload.bandwidth);
    EXPECT_TRUE(again.ok()) << again.status().message();
    if (!again.ok()) continue;
    EXPECT_EQ(again->iteration_s, plan->iteration_s) << what;
    EXPECT_EQ(again->peak_memory_bytes, plan->peak_memory_bytes) << what;
    for (std::int64_t peak : plan->peak_memory_bytes)
      EXPECT_LE(peak, q.memory_cap_bytes.value_or(peak));
    EXPECT_LE(plan->mapping_lower_bound_s, plan->iteration_s * (1 + 1e-12)) << what;
    counts.simulations += plan->simulations;
    counts.offloaded += plan->offload.tier != OffloadTier::none;
    counts.split += plan->schedule == "pipefb";
  }
  return counts;
}

TEST(Planner, EqualsExhaustiveSearchOnRandomSmallCases) {
  // Layout automatic (classic schedules and PipeFB) in most trials, classic or PipeFB alone
  // in some.
  const PropertyCounts counts =
      check_against_brute_force(20261124, 300, [](int trial, std::mt19937_64&, PlanRequest& q) {
        if (trial % 5 == 0) q.schedules = {"1f1b", "zb-h1"};
        if (trial % 7 == 3) q.layout = LayoutChoice::classic;
        if (trial % 7 == 5) q.layout = LayoutChoice::pipefb;
      });
  // The cases must exercise the cap, including caps nothing fits, and PipeFB must win some.
  EXPECT_GT(counts.capped, 50);
  EXPECT_GT(counts.infeasible, 0);
  EXPECT_GT(counts.split, 10);
  // Pruning is the point: far fewer simulations than exhaustive search.
  EXPECT_LT(counts.simulations * 5, counts.evaluated);
  std::printf("%d simulations by the planner against %d by exhaustive search; %d PipeFB plans\n",
              counts.simulations, counts.evaluated, counts.split);
}

TEST(Planner, WithOffloadEqualsExhaustiveSearchOverPoliciesToo) {
  const PropertyCounts counts =
      check_against_brute_force(20261125, 80, [](int trial, std::mt19937_64& rng, PlanRequest& q) {
        q.offload.choose = true;
        q.limits.max_lookahead = 1;
        q.limits.max_microbatches = 4;
        // Stashes heavier than the state, as in activation-bound models.
        for (BlockProfile& b : q.profile.blocks) b.stash_bytes *= 8;
        if (trial % 4 == 0) q.offload.tiers = {OffloadTier::peer};
        if (trial % 4 == 2) q.offload.tiers = {OffloadTier::file};
        // From a little over a stash per pass to far faster.
        q.offload.bandwidth.file_bytes_per_s =
            std::exp(std::uniform_real_distribution<double>(std::log(5e7), std::log(5e9))(rng));
      }, /*offload_caps=*/true, /*max_blocks=*/6);
  EXPECT_GT(counts.capped, 40);
  EXPECT_GT(counts.offloaded, 6);
  std::printf("%d simulations by the planner against %d by exhaustive search; %d plans offload\n",
              counts.simulations, counts.evaluated, counts.offloaded);
}

ModelProfile uniform_profile(int blocks, std::int64_t parameter_bytes) {
  ModelProfile p;
  p.microbatch_samples = 1;
  for (int i = 0; i < blocks; ++i)
    p.blocks.push_back({"layer" + std::to_string(i), 1.0, 1.0, 1.0, 1 << 20, 1 << 20,
                        parameter_bytes, parameter_bytes, 2 * parameter_bytes});
  return p;
}

TEST(Planner, AMemoryCapForcesMoreStages) {
  PlanRequest q;
  q.profile = uniform_profile(8, 1 << 24);  // 64 MiB of state per block, 512 MiB in all
  q.topology = *synthetic_topology(1, 4, {1e10, 1e-6}, {1e10, 1e-6});
  q.global_batch = 8;
  const auto free = make_plan(q);
  ASSERT_TRUE(free.ok()) << free.status().message();
  EXPECT_EQ(free->pipeline_ranks, 1) << free->explanation;  // data parallel has no bubble

  q.memory_cap_bytes = std::int64_t{300} << 20;  // at most 4 blocks' state per rank
  const auto capped = make_plan(q);
  ASSERT_TRUE(capped.ok()) << capped.status().message();
  EXPECT_GE(capped->pipeline_ranks, 2) << capped->explanation;
  for (std::int64_t peak : capped->peak_memory_bytes) EXPECT_LE(peak, *q.memory_cap_bytes);
  EXPECT_GT(capped->iteration_s, free->iteration_s);
}

// Where the job sets no cap, the runtime passes each rank's share of its node's memory: the
// same search, but the words name the node, not a cap the user never set.
TEST(Planner, ANodeShareIsPlannedWithinAndNamedAsSuch) {
  PlanRequest q;
  q.profile = uniform_profile(8, 1 << 24);
  q.topology = *synthetic_topology(1, 4, {1e10, 1e-6}, {1e10, 1e-6});
  q.global_batch = 8;
  q.memory_cap_bytes = std::int64_t{300} << 20;
  q.memory_cap_is_node_share = true;
  const auto plan = make_plan(q);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  for (std::int64_t peak : plan->peak_memory_bytes) EXPECT_LE(peak, *q.memory_cap_bytes);
  EXPECT_NE(plan->explanation.find(" of 0.293 GiB (314572800 bytes), each rank's share of its "
                                   "node's memory\n"),
            std::string::npos)
      << plan->explanation;
  EXPECT_EQ(plan->explanation.find(" cap"), std::string::npos) << plan->explanation;

  q.memory_cap_bytes = std::int64_t{100} << 20;
  const auto none = make_plan(q);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::memory_cap);
  const std::string& text = none.status().message();
  EXPECT_EQ(text.rfind("planner: no plan keeps every rank within its share of its node's memory, "
                       "0.0977 GiB (104857600 bytes): the smallest peak found is ",
                       0),
            0u)
      << text;
  EXPECT_NE(text.find("a larger max_microbatches or global batch), more nodes, or offload"),
            std::string::npos)
      << text;
}

TEST(Planner, AnImpossibleCapSaysTheSmallestPeakAndWhatToChange) {
  PlanRequest q;
  q.profile = uniform_profile(8, 1 << 24);
  q.topology = *synthetic_topology(1, 4, {1e10, 1e-6}, {1e10, 1e-6});
  q.global_batch = 8;
  q.memory_cap_bytes = std::int64_t{100} << 20;  // less than two blocks' state
  const auto plan = make_plan(q);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::memory_cap);
  const std::string& text = plan.status().message();
  EXPECT_NE(text.find("memory cap of 0.0977 GiB (104857600 bytes)"), std::string::npos) << text;
  // Two blocks per rank at P = 4 (128 MiB of state), m = 8 microbatches of one sample:
  // rank 1 holds 6 slots of 8 MiB (a stash of its input, inner output and saved state, 4 MiB;
  // their gradients, 2 MiB; its output and the output's gradient): 3 live microbatches,
  // 2 more whose receives were posted ahead, one whose sends are not yet seen complete.
  EXPECT_NE(text.find("the smallest peak found is 0.172 GiB (184549376 bytes) on pipeline rank 1 "
                      "(P=4 R=1 1f1b m=8)"),
            std::string::npos)
      << text;
  // What that peak is made of: 2 blocks' state of 64 MiB each dominates the 6 slots' 48 MiB.
  EXPECT_NE(text.find("the smallest cap known to fit; parameters, gradients and optimizer state "
                      "dominate it (0.125 GiB (134217728 bytes); stashes and transfer buffers "
                      "0.0469 GiB (50331648 bytes))"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("use more ranks, smaller microbatches"), std::string::npos) << text;
  EXPECT_NE(text.find("a larger cap, or offload"), std::string::npos) << text;

  // Stashes dominate when the state is small and the microbatches large.
  q.profile = uniform_profile(8, 1 << 10);
  for (BlockProfile& b : q.profile.blocks) b.stash_bytes = std::int64_t{64} << 20;
  q.limits.max_microbatches = 1;
  const auto stashes = make_plan(q);
  ASSERT_FALSE(stashes.ok());
  EXPECT_NE(stashes.status().message().find("activation stashes and transfer buffers dominate it"),
            std::string::npos)
      << stashes.status().message();
}

TEST(Planner, WithoutACapWarnsWhenAPeakExceedsTheNodesMemoryPerRank) {
  PlanRequest q;
  q.profile = uniform_profile(8, 1 << 24);  // 512 MiB of state in all
  q.topology = *synthetic_topology(1, 2, {1e10, 1e-6}, {1e10, 1e-6});
  q.global_batch = 8;
  const auto unknown = make_plan(q);
  ASSERT_TRUE(unknown.ok()) << unknown.status().message();
  EXPECT_EQ(unknown->explanation.find("warning"), std::string::npos) << unknown->explanation;

  // hwloc says the node has 256 MiB: 128 MiB per rank, below any rank's peak.
  q.topology.nodes = {NodeFacts{"n0", 2, {{std::int64_t{256} << 20, "DRAM", 2}}}};
  const auto plan = make_plan(q);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  const std::string& text = plan->explanation;
  EXPECT_NE(text.find("warning: rank "), std::string::npos) << text;
  EXPECT_NE(text.find("more than the 128.0 MiB per rank that hwloc reports for node 0 (2 ranks); "
                      "set memory.cap to plan within it"),
            std::string::npos)
      << text;

  // With a cap the planner plans within it and says nothing of the node.
  q.memory_cap_bytes = std::int64_t{1} << 30;
  const auto capped = make_plan(q);
  ASSERT_TRUE(capped.ok()) << capped.status().message();
  EXPECT_EQ(capped->explanation.find("warning"), std::string::npos) << capped->explanation;
}

TEST(Planner, PutsStagesThatExchangeActivationsOnWellConnectedRanks) {
  PlanRequest q;
  // 4 GiB of state per block and a 20 GiB cap: two blocks per rank and their slots (about
  // 1.5 GiB each) fit, four do not, so P = 4.
  q.profile = uniform_profile(8, std::int64_t{1} << 30);
  for (BlockProfile& b : q.profile.blocks) b.activation_bytes = std::int64_t{256} << 20;
  // 2 nodes x 2 ranks: 10 GB/s inside a node, 100 MB/s between nodes; rank 0 on node 1
  // and rank 2 on node 0.
  q.topology = two_nodes_with_ranks_swapped(0, 2, {1e10, 1e-6}, {1e8, 1e-4});
  q.global_batch = 8;
  q.schedules = {"1f1b"};
  q.memory_cap_bytes = std::int64_t{20} << 30;
  const auto plan = make_plan(q);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ASSERT_EQ(plan->pipeline_ranks, 4) << plan->explanation;
  const auto node = [&](int p) {
    return q.topology.node_of[static_cast<std::size_t>(plan->world_rank_of(0, p))];
  };
  // One slow crossing: stages 0-1 on one node, 2-3 on the other.
  EXPECT_EQ(node(0), node(1)) << plan->explanation;
  EXPECT_EQ(node(2), node(3)) << plan->explanation;
  EXPECT_NE(node(1), node(2)) << plan->explanation;
}

TEST(Planner, LargeModelsUseTheMinMaxSearchAndStayWithinTheCap) {
  PlanRequest q;
  q.profile = uniform_profile(64, 1 << 24);
  q.profile.blocks[0].parameter_bytes *= 8;  // a heavy embedding
  q.profile.blocks[63].forward_s = 4;        // and a slow head
  q.topology = *synthetic_topology(4, 4, {2e10, 1e-6}, {2e9, 2e-5});
  q.global_batch = 64;
  q.memory_cap_bytes = std::int64_t{1} << 30;
  const auto plan = make_plan(q);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_FALSE(plan->exact);
  EXPECT_EQ(plan->pipeline_ranks * plan->replicas, 16);
  for (std::int64_t peak : plan->peak_memory_bytes) EXPECT_LE(peak, *q.memory_cap_bytes);
  // The same shape split evenly by blocks is no faster.
  PipelineLayout even = *plan;
  const int S = plan->pipeline_ranks * plan->chunks;
  for (int s = 0; s < S; ++s)
    even.stages[static_cast<std::size_t>(s)] = {s * 64 / S, (s + 1) * 64 / S - 1};
  const auto uniform = predict(q.profile, q.topology, even);
  ASSERT_TRUE(uniform.ok()) << uniform.status().message();
  EXPECT_LE(plan->iteration_s, uniform->iteration_s) << plan->explanation;

  // 64 MiB is one block's state: nothing fits, and the error still reports a simulated
  // peak (rank 0 holds the embedding's 176 MiB of state, 3 more blocks and their slots at
  // best).
  q.memory_cap_bytes = std::int64_t{64} << 20;
  const auto none = make_plan(q);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::memory_cap);
  EXPECT_NE(none.status().message().find("the smallest peak found is 0.78 GiB (837812224 bytes) "
                                         "on pipeline rank 0"),
            std::string::npos)
      << none.status().message();
}

TEST(Planner, RejectsBadRequestsNamingTheValue) {
  PlanRequest q;
  q.profile = uniform_profile(4, 1);
  q.topology = *synthetic_topology(1, 2, {1e10, 0}, {1e10, 0});
  q.global_batch = 0;
  EXPECT_EQ(make_plan(q).status().message(),
            "planner: global_batch = 0 must be >= 1 (samples per iteration over all replicas)");
  q.global_batch = 4;
  q.schedules = {"1f1b", "pipedream"};
  EXPECT_EQ(make_plan(q).status().message(),
            "planner: unknown schedule 'pipedream' (known: gpipe, 1f1b, interleaved-1f1b, zb-h1, "
            "pipefb)");
  q.schedules = {"1f1b", "pipefb"};
  q.layout = LayoutChoice::classic;
  EXPECT_EQ(make_plan(q).status().message(),
            "planner: schedule 'pipefb' puts a stage on two ranks, which layout classic forbids; "
            "drop it from the schedules or ask for layout automatic or pipefb");
  q.schedules = {"1f1b"};
  q.layout = LayoutChoice::automatic;
  q.offload.choose = true;
  q.offload.tiers = {OffloadTier::file, OffloadTier::host};
  EXPECT_EQ(make_plan(q).status().message(),
            "planner: the host offload tier is not modelled (the rank topology does not say "
            "whether a rank has a second memory node): choose among file and peer");
  q.offload.tiers = {OffloadTier::file};
  q.offload.bandwidth.file_bytes_per_s = 0;
  EXPECT_EQ(make_plan(q).status().message(),
            "planner: offload: the file tier's bandwidth = 0.000000 bytes/s must be a positive "
            "finite number");
  q.offload = {};
  q.memory_cap_bytes = 0;
  EXPECT_NE(make_plan(q).status().message().find("memory_cap_bytes = 0 must be >= 1"),
            std::string::npos);
  // PipeFB on 3 ranks: no stage can have its two ranks in every replica.
  q.memory_cap_bytes.reset();
  q.topology = *synthetic_topology(1, 3, {1e10, 0}, {1e10, 0});
  q.global_batch = 3;
  q.layout = LayoutChoice::pipefb;
  EXPECT_EQ(make_plan(q).status().message(),
            "planner: no pipeline shape fits: the global batch 3 must be divisible by the number "
            "of replicas, schedules must be non-empty, the model needs at least one block per "
            "stage, and pipefb needs an even number of ranks per replica (2 per stage)");
}

// Scratch grows with the microbatch by what the profile saw it grow at twice the samples,
// and all of it where a profile did not measure that; it never shrinks.
TEST(PlannerCost, ScratchGrowsByItsMeasuredGrowthAndNeverShrinks) {
  ModelProfile p;
  p.microbatch_samples = 2;
  p.blocks = {{.name = "a", .scratch_bytes = 1000, .scratch_growth_bytes = 100},
              {.name = "b", .scratch_bytes = 500}};
  const BlockSums triple = scale_blocks(p, 6);
  EXPECT_EQ(triple.scratch_bytes({0, 0}), 1000 + 2 * 100);
  EXPECT_EQ(triple.scratch_bytes({1, 1}), 3 * 500);
  EXPECT_EQ(triple.scratch_bytes({0, 1}), 1500);  // a rank holds its largest
  const BlockSums half = scale_blocks(p, 1);
  EXPECT_EQ(half.scratch_bytes({0, 0}), 1000);
  EXPECT_EQ(half.scratch_bytes({1, 1}), 500);
}

// The chunked GPT head's buffer holds min(rows, head_chunk_rows) rows: the bounded part of a
// workspace grows with the samples only up to its bound, the rest proportionally.
TEST(PlannerCost, ABoundedWorkspaceGrowsOnlyUpToItsBound) {
  ModelProfile p;
  p.microbatch_samples = 16;
  p.blocks = {{.name = "head",
               .workspace_bytes = 1000 + 800,
               .bounded_workspace_per_sample = 100,
               .bounded_workspace_most = 800}};
  const auto workspace = [&](std::int64_t samples) {
    return scale_blocks(p, samples).stage({0, 0}).workspace_bytes;
  };
  EXPECT_EQ(workspace(16), 1800);
  EXPECT_EQ(workspace(8), 500 + 800);  // scaled whole, 900: the head would not fit its buffer
  EXPECT_EQ(workspace(4), 250 + 400);
  EXPECT_EQ(workspace(32), 2000 + 800);
}

// Times scale proportionally from the profiled microbatch up; below it they lie on the line
// through the one-sample time where the profile has one, proportionally where not.
TEST(PlannerCost, TimesBelowTheProfiledMicrobatchFollowTheOneSampleTimes) {
  ModelProfile p;
  p.microbatch_samples = 4;
  p.blocks = {{.name = "a", .forward_s = 4.0, .backward_input_s = 2.0, .backward_weight_s = 1.0,
               .one_sample = PassSeconds{1.6, 0.8, 0.25}},
              {.name = "b", .forward_s = 4.0, .backward_input_s = 2.0, .backward_weight_s = 1.0}};
  const auto f = [](const BlockSums& s, int block) { return s.stage({block, block}).forward_s; };
  const auto bi = [](const BlockSums& s, int block) {
    return s.stage({block, block}).backward_input_s;
  };
  const auto bw = [](const BlockSums& s, int block) {
    return s.stage({block, block}).backward_weight_s;
  };
  const BlockSums one = scale_blocks(p, 1), two = scale_blocks(p, 2), four = scale_blocks(p, 4),
                  eight = scale_blocks(p, 8);
  EXPECT_DOUBLE_EQ(f(one, 0), 1.6);
  EXPECT_DOUBLE_EQ(bi(one, 0), 0.8);
  EXPECT_DOUBLE_EQ(bw(one, 0), 0.25);
  EXPECT_DOUBLE_EQ(f(two, 0), 1.6 + (4.0 - 1.6) / 3);
  EXPECT_DOUBLE_EQ(bw(two, 0), 0.25 + (1.0 - 0.25) / 3);
  EXPECT_DOUBLE_EQ(f(four, 0), 4.0);
  EXPECT_DOUBLE_EQ(f(eight, 0), 8.0);
  EXPECT_DOUBLE_EQ(bi(eight, 0), 4.0);
  EXPECT_DOUBLE_EQ(f(one, 1), 1.0);
  EXPECT_DOUBLE_EQ(f(two, 1), 2.0);
  EXPECT_DOUBLE_EQ(f(eight, 1), 8.0);
  EXPECT_DOUBLE_EQ(two.stage({0, 1}).forward_s, 1.6 + (4.0 - 1.6) / 3 + 2.0);
}

// The bound the search prunes with equals the simulator on equal stages and free links.
TEST(PlannerBound, MatchesTheSimulatorOnEqualStages) {
  for (const std::string name : {"gpipe", "1f1b", "zb-h1", "interleaved-1f1b", "pipefb"})
    for (int P : {1, 2, 4})
      for (int m : {4, 8}) {
        const int v = name == "interleaved-1f1b" ? 2 : 1;
        const auto schedule = make_schedule(name, {P, m, v, false});
        ASSERT_TRUE(schedule.ok());
        CostModel costs;
        // PipeFB's closed form wants F = B + W.
        costs.stages.assign(static_cast<std::size_t>(P * v),
                            name == "pipefb" ? StageCost{1.0, 0.5, 0.5}
                                             : StageCost{1.0 / v, 1.0 / v, 1.0 / v});
        const auto sim = simulate(*schedule, costs);
        ASSERT_TRUE(sim.ok());
        const std::vector<Link> free(static_cast<std::size_t>(P * v - 1));
        EXPECT_DOUBLE_EQ(
            iteration_lower_bound(schedule_facts(*schedule), costs.stages, free, free, 0),
            sim->iteration_s)
            << name << " P=" << P << " m=" << m;
      }
}

// Shapes too large to generate get their facts from the generators' closed forms. The time
// facts must equal those read from the lists, or the bound would prune plans it should keep
// (a W counted before a gradient that in fact leaves first).
TEST(PlannerBound, EstimatedFactsEqualTheGeneratedOnes) {
  for (const std::string name : {"gpipe", "1f1b", "interleaved-1f1b"})
    for (int P : {1, 2, 4})
      for (int m : {4, 8, 16}) {
        const int v = name == "interleaved-1f1b" ? 2 : 1;
        const auto schedule = make_schedule(name, {P, m, v, false});
        ASSERT_TRUE(schedule.ok());
        const ScheduleFacts listed = schedule_facts(*schedule);
        const ScheduleFacts estimated = estimated_facts(name, P, v, m);
        const std::string at = name + " P=" + std::to_string(P) + " m=" + std::to_string(m);
        EXPECT_EQ(estimated.fused, listed.fused) << at;
        // Stashes may be under-estimated (a weaker memory bound), never over.
        ASSERT_EQ(estimated.max_live.size(), listed.max_live.size()) << at;
        for (std::size_t i = 0; i < listed.max_live.size(); ++i)
          EXPECT_LE(estimated.max_live[i], listed.max_live[i]) << at << " cell " << i;
        EXPECT_EQ(estimated.w_after, listed.w_after) << at;
        EXPECT_EQ(estimated.last_b_chunk, listed.last_b_chunk) << at;
        EXPECT_EQ(estimated.last_w_chunk, listed.last_w_chunk) << at;
      }
}

}  // namespace
}  // namespace spw::sched
