// Offload changes nothing but memory: with every tier this machine has, every schedule and
// 2 or 4 pipeline ranks, losses and weights are bit-identical to the same run without
// offload (CRC32C verified on every fetch) and stashes really left; under a memory cap the
// resident run could not meet, the offloaded one trains. The host tier needs a second memory node,
// which this machine lacks: choosing it is an error that says so.
#include "pipeline_test_support.hpp"

namespace spw {
namespace {

OffloadConfig offload_to(OffloadTier tier, int keep = 0, int lookahead = 1) {
  OffloadConfig config;
  config.tier = tier;
  config.keep = keep;
  config.lookahead = lookahead;
  config.verify = true;
  return config;
}

class OffloadMath : public ::testing::TestWithParam<std::string> {};

TEST_P(OffloadMath, EveryTierGivesTheSameBits) {
  const std::string schedule = GetParam();
  for (int P : {2, 4}) {
    if (P > world_size()) continue;
    const TrainSettings settings = tiny_gpt(8, "adamw");
    const Outcome resident = pipeline(settings, schedule, P, 1);
    for (OffloadTier tier : {OffloadTier::file, OffloadTier::peer}) {
      const Outcome offloaded = pipeline(settings, schedule, P, 1, offload_to(tier));
      if (world_rank() != 0) continue;
      const std::string where = schedule + " P=" + std::to_string(P) + " tier " +
                                std::string(to_string(tier));
      ASSERT_TRUE(resident.ok) << resident.error;
      ASSERT_TRUE(offloaded.ok) << where << ": " << offloaded.error;
      EXPECT_EQ(offloaded.loss, resident.loss) << where;
      EXPECT_EQ(offloaded.weights, resident.weights) << where;
      EXPECT_GT(offloaded.bytes_evicted, 0) << where;
    }
  }
}

TEST_P(OffloadMath, ReplicasOffloadToo) {
  if (world_size() < 4) GTEST_SKIP() << "needs 4 ranks";
  const std::string schedule = GetParam();
  const TrainSettings settings = tiny_gpt(8, "adamw");
  const Outcome resident = pipeline(settings, schedule, 2, 2);
  const Outcome offloaded = pipeline(settings, schedule, 2, 2, offload_to(OffloadTier::peer, 1, 2));
  if (world_rank() != 0) return;
  ASSERT_TRUE(offloaded.ok) << offloaded.error;
  EXPECT_EQ(offloaded.loss, resident.loss);
  EXPECT_EQ(offloaded.weights, resident.weights);
}

INSTANTIATE_TEST_SUITE_P(Schedules, OffloadMath,
                         ::testing::Values("gpipe", "1f1b", "interleaved", "zb-h1"),
                         schedule_test_name);

// What offload is for: a cap below what the run needs with every stash resident, met with
// offload, same bits. (Running resident under the cap would end one rank mid-step and
// strand its peer, which only an MPI_Abort cures: the CLI test covers that path.)
TEST(OffloadUnderCap, AJobThatDoesNotFitTrainsWithOffload) {
  TrainSettings settings = tiny_gpt(8, "adamw");
  const Outcome free_run = pipeline(settings, "gpipe", 2, 1);
  const std::size_t cap = cap_that_needs_offload(free_run);
  settings.memory_cap = cap;
  const Outcome offloaded = pipeline(settings, "gpipe", 2, 1, offload_to(OffloadTier::file));
  if (world_rank() != 0) return;
  ASSERT_TRUE(free_run.ok) << free_run.error;
  ASSERT_GT(free_run.peak_bytes, cap);
  ASSERT_TRUE(offloaded.ok) << offloaded.error;
  EXPECT_LE(offloaded.peak_bytes, cap);
  EXPECT_EQ(offloaded.loss, free_run.loss);
  EXPECT_EQ(offloaded.weights, free_run.weights);
}

// With offload a slot's memory goes to its chunk's spare when its stash is evicted or its
// backward is done, and the next forward, prefetch or backward takes it instead of mapping
// new pages. Without that a GPipe step that offloads every stash maps every forward's slot,
// every prefetch's stash and every backward's gradients anew: m slots and m stashes. With
// it, prefetches and backwards take what the microbatch before left, in instruction order;
// only a forward can find the spare empty (when no eviction finished since the forward
// before: the copy thread's timing), so a step maps at most m slots and one more (the
// gradients dropped at the step's end).
TEST(OffloadRecycling, AStepMapsNoMoreThanItsForwardsMayMiss) {
  const TrainSettings settings = tiny_gpt(8, "adamw");
  const int m = 8;
  const Outcome resident = pipeline(settings, "gpipe", 2, 1);
  const Outcome run = pipeline(settings, "gpipe", 2, 1, offload_to(OffloadTier::file));
  if (world_rank() != 0) return;
  ASSERT_TRUE(run.ok) << run.error;
  ASSERT_GT(run.slot_bytes, 0u);
  std::printf("recycling: last step mapped %zu bytes, resident %zu, a slot %zu\n",
              run.last_step_allocated_bytes, resident.last_step_allocated_bytes, run.slot_bytes);
  EXPECT_LE(run.last_step_allocated_bytes,
            resident.last_step_allocated_bytes + static_cast<std::size_t>(m + 1) * run.slot_bytes);
}

// The spares count in the ledger. A cap at the run's own uncapped peak binds where an
// allocation would pass it: the spares' memory goes first, then the wait for evictions; the
// ledger stays under it, with the same bits.
TEST(OffloadRecycling, ACapAtTheUncappedPeakHolds) {
  TrainSettings settings = tiny_gpt(8, "adamw");
  const Outcome free_run = pipeline(settings, "gpipe", 2, 1, offload_to(OffloadTier::file));
  unsigned long long cap = world_rank() == 0 ? free_run.peak_bytes : 0;
  MPI_Bcast(&cap, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
  settings.memory_cap = static_cast<std::size_t>(cap);
  const Outcome capped = pipeline(settings, "gpipe", 2, 1, offload_to(OffloadTier::file));
  if (world_rank() != 0) return;
  ASSERT_TRUE(free_run.ok) << free_run.error;
  ASSERT_TRUE(capped.ok) << capped.error;
  EXPECT_LE(capped.peak_bytes, cap);
  EXPECT_EQ(capped.loss, free_run.loss);
  EXPECT_EQ(capped.weights, free_run.weights);
}

TEST(OffloadSetup, HostTierOnASingleMemoryNodeSaysWhatToUseInstead) {
  const Outcome run = pipeline(tiny_gpt(4), "1f1b", 2, 1, offload_to(OffloadTier::host));
  if (world_rank() != 0) return;
  ASSERT_FALSE(run.ok);
  EXPECT_NE(run.error.find("offload.tier = \"host\" needs a second memory node"), std::string::npos)
      << run.error;
  EXPECT_NE(run.error.find("use offload.tier = \"file\" or \"peer\""), std::string::npos);
}

TEST(OffloadSetup, AMissingFileTierDirectoryIsNamed) {
  OffloadConfig config = offload_to(OffloadTier::file);
  config.dir = "/nonexistent/spillway-offload";
  const Outcome run = pipeline(tiny_gpt(4), "1f1b", 2, 1, config);
  if (world_rank() != 0) return;
  ASSERT_FALSE(run.ok);
  EXPECT_NE(run.error.find("/nonexistent/spillway-offload"), std::string::npos) << run.error;
}

}  // namespace
}  // namespace spw
