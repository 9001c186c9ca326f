#include <gtest/gtest.h>

#include "runtime/pipeline_layout.hpp"

namespace spw {
namespace {

ParallelConfig stages(int count, int replicas = 1) {
  ParallelConfig parallel;
  parallel.stages.form = StagesSpec::Form::count;
  parallel.stages.count = count;
  parallel.replicas = replicas;
  return parallel;
}

std::string error_of(const Result<PipelineLayout>& layout) {
  EXPECT_FALSE(layout.ok());
  return layout.ok() ? "" : layout.status().message();
}

TEST(PipelineLayout, EvenRangesPutTheLargerStagesLast) {
  const std::vector<StageRange> ranges = even_stage_ranges(10, 4);
  ASSERT_EQ(ranges.size(), 4u);
  EXPECT_EQ(ranges[0], (StageRange{0, 1}));
  EXPECT_EQ(ranges[1], (StageRange{2, 3}));
  EXPECT_EQ(ranges[2], (StageRange{4, 6}));
  EXPECT_EQ(ranges[3], (StageRange{7, 9}));
}

TEST(PipelineLayout, CountAndReplicasPlaceRanks) {
  auto layout = make_pipeline_layout(stages(2, 2), 10, 16, 8, 4);
  ASSERT_TRUE(layout.ok()) << layout.status().message();
  EXPECT_EQ(layout->pipeline_ranks, 2);
  EXPECT_EQ(layout->replicas, 2);
  EXPECT_EQ(layout->microbatches, 4);        // 8 of the batch, 4 per replica
  EXPECT_EQ(layout->microbatch_samples, 2);  // 16 / 8
  EXPECT_EQ(layout->pipeline_rank_of(3), 1);
  EXPECT_EQ(layout->replica_of(3), 1);
  EXPECT_EQ(layout->schedule, "1f1b");
}

TEST(PipelineLayout, AutoUsesOneStagePerPipelineRank) {
  ParallelConfig parallel;
  parallel.replicas = 2;
  auto layout = make_pipeline_layout(parallel, 10, 16, 4, 6);
  ASSERT_TRUE(layout.ok()) << layout.status().message();
  EXPECT_EQ(layout->stage_count(), 3);
}

TEST(PipelineLayout, PipeFbGivesEveryStageAForwardAndABackwardRank) {
  ParallelConfig parallel;
  parallel.layout = Layout::pipefb;
  parallel.replicas = 2;
  auto layout = make_pipeline_layout(parallel, 10, 16, 4, 8);
  ASSERT_TRUE(layout.ok()) << layout.status().message();
  EXPECT_EQ(layout->schedule, "pipefb");
  EXPECT_EQ(layout->stage_count(), 2);
  EXPECT_EQ(layout->pipeline_ranks, 2);
  EXPECT_EQ(layout->ranks_in_pipeline(), 4);
  EXPECT_EQ(layout->world_size(), 8);
  EXPECT_EQ(layout->pipeline_rank_of(6), 2);  // replica 1's first backward rank
  EXPECT_EQ(layout->replica_of(6), 1);
  EXPECT_NE(layout->describe().find("on 4 ranks (forward and backward apart)"), std::string::npos);
}

TEST(PipelineLayout, PipeFbNamesTheRankCountItNeeds) {
  ParallelConfig parallel = stages(2);
  parallel.layout = Layout::pipefb;
  EXPECT_NE(error_of(make_pipeline_layout(parallel, 10, 16, 4, 3)).find("mpirun -n 4"),
            std::string::npos);
  ParallelConfig automatic;
  automatic.layout = Layout::pipefb;
  EXPECT_NE(error_of(make_pipeline_layout(automatic, 10, 16, 4, 1)).find("mpirun -n 2"),
            std::string::npos);
  ParallelConfig chunked = stages(2);
  chunked.layout = Layout::pipefb;
  chunked.chunks = 2;
  EXPECT_NE(error_of(make_pipeline_layout(chunked, 10, 16, 4, 4)).find("parallel.chunks = 1"),
            std::string::npos);
}

TEST(PipelineLayout, InterleavedHoldsSeveralChunksPerRank) {
  ParallelConfig parallel = stages(4);
  parallel.chunks = 2;
  parallel.schedule = ScheduleKind::interleaved;
  auto layout = make_pipeline_layout(parallel, 10, 16, 4, 2);
  ASSERT_TRUE(layout.ok()) << layout.status().message();
  EXPECT_EQ(layout->pipeline_ranks, 2);
  EXPECT_EQ(layout->stage_count(), 4);
  EXPECT_EQ(layout->schedule, "interleaved-1f1b");
}

TEST(PipelineLayout, MoreStagesThanBlocksIsAnError) {
  EXPECT_EQ(error_of(make_pipeline_layout(stages(12), 10, 16, 4, 12)),
            "parallel.stages asks for 12 stages but the model has only 10 blocks to cut them "
            "from: use at most 10 stages");
}

TEST(PipelineLayout, WrongRankCountSaysHowToLaunch) {
  EXPECT_EQ(error_of(make_pipeline_layout(stages(2, 2), 10, 16, 4, 6)),
            "2 stages (1 per rank) x 2 replicas need 4 ranks, but the job was launched with 6: "
            "launch with mpirun -n 4 or change parallel.stages / parallel.replicas");
  EXPECT_EQ(error_of(make_pipeline_layout(stages(2, 2), 10, 16, 4, 3)),
            "parallel.replicas = 2 does not divide the 3 ranks the job was launched with: "
            "launch a multiple of 2 ranks or change parallel.replicas");
}

TEST(PipelineLayout, RangesMustReachTheLastBlock) {
  ParallelConfig parallel;
  parallel.stages.form = StagesSpec::Form::ranges;
  parallel.stages.ranges = {{0, 3}, {4, 8}};
  EXPECT_EQ(error_of(make_pipeline_layout(parallel, 10, 16, 4, 2)),
            "parallel.stages ranges end at block 8 but the model's last block is 9: every block "
            "needs a stage, so the last range must end at 9");
  parallel.stages.ranges = {{0, 3}, {4, 9}};
  auto layout = make_pipeline_layout(parallel, 10, 16, 4, 2);
  ASSERT_TRUE(layout.ok()) << layout.status().message();
  EXPECT_EQ(layout->stages[1], (StageRange{4, 9}));
}

TEST(PipelineLayout, ScheduleAndChunksMustAgree) {
  ParallelConfig parallel = stages(2);
  parallel.schedule = ScheduleKind::interleaved;
  EXPECT_NE(error_of(make_pipeline_layout(parallel, 10, 16, 4, 2))
                .find("parallel.schedule = \"interleaved\" needs parallel.chunks >= 2"),
            std::string::npos);
  parallel = stages(4);
  parallel.chunks = 2;
  EXPECT_NE(error_of(make_pipeline_layout(parallel, 10, 16, 4, 2))
                .find("runs one chunk per rank: set parallel.chunks = 1"),
            std::string::npos);
  parallel = stages(3);
  parallel.chunks = 2;
  parallel.schedule = ScheduleKind::interleaved;
  EXPECT_NE(error_of(make_pipeline_layout(parallel, 10, 16, 4, 2))
                .find("make parallel.stages a multiple of 2"),
            std::string::npos);
}

TEST(PipelineLayout, MicrobatchesMustSplitOverReplicasAndBatch) {
  EXPECT_EQ(error_of(make_pipeline_layout(stages(1, 2), 10, 16, 3, 2)),
            "train.microbatches = 3 must be a multiple of parallel.replicas = 2 (each replica "
            "runs an equal share of the batch's microbatches)");
  EXPECT_EQ(error_of(make_pipeline_layout(stages(1), 10, 10, 4, 1)),
            "train.batch = 10 must be a multiple of train.microbatches = 4");
  ParallelConfig parallel = stages(4);
  parallel.chunks = 2;
  parallel.schedule = ScheduleKind::interleaved;
  EXPECT_EQ(error_of(make_pipeline_layout(parallel, 10, 16, 1, 2)),
            "the interleaved schedule needs the microbatches per replica (1) to be a multiple "
            "of the pipeline's 2 ranks: change train.microbatches");
}

}  // namespace
}  // namespace spw
