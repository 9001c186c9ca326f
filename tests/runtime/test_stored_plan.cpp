// job_with_plan: the layout a plan.json records, turned back into a job whose keys give it,
// and the plans it refuses for a job, each by message.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <array>
#include <string>
#include <vector>

#include "runtime/pipeline_job.hpp"
#include "runtime/stored_plan.hpp"

namespace spw {
namespace {

constexpr const char* kModel = "gpt layers=4 d_model=128 heads=4 seq=64 vocab=256";

// The quickstart's model and batch, stages left to the planner.
JobConfig planned_job() {
  JobConfig job;
  job.model.layers = 4;
  job.model.d_model = 128;
  job.model.heads = 4;
  job.model.seq = 64;
  job.train.batch = 16;
  job.train.microbatches = 4;
  job.parallel.stages.form = StagesSpec::Form::automatic;
  job.offload.tier = OffloadTier::automatic;
  return job;
}

struct Planned {
  std::string schedule;
  int pipeline_ranks, replicas, chunks, microbatches, microbatch_samples;
  std::vector<std::vector<int>> stages;
  std::vector<int> world_rank;
};

// What plan_record writes, as far as a plan is read back.
nlohmann::json record(const Planned& p, const std::string& model = kModel) {
  return {{"how", "searched by the planner"},
          {"layout",
           {{"schedule", p.schedule},
            {"pipeline_ranks", p.pipeline_ranks},
            {"replicas", p.replicas},
            {"chunks", p.chunks},
            {"microbatches", p.microbatches},
            {"microbatch_samples", p.microbatch_samples},
            {"stages", p.stages},
            {"world_rank", p.world_rank},
            {"offload", {{"tier", "file"}, {"keep", 1}, {"lookahead", 1}}}}},
          {"predicted", {{"iteration_seconds", 0.04}}},
          {"explanation", "a plan"},
          {"profile", {{"model", model}, {"microbatch_samples", p.microbatch_samples}}}};
}

// The quickstart's plan on this VM: one rank of two chunks, two replicas.
const Planned kInterleaved{"interleaved-1f1b", 1, 2, 2, 1, 8, {{0, 0}, {1, 5}}, {0, 1}};

TEST(StoredPlan, GivesTheJobThePlansLayoutAsKeys) {
  const auto job = job_with_plan(planned_job(), record(kInterleaved), 2);
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(job->parallel.stages.form, StagesSpec::Form::ranges);
  EXPECT_EQ(job->parallel.stages.ranges, (std::vector<StageRange>{{0, 0}, {1, 5}}));
  EXPECT_EQ(job->parallel.replicas, 2);
  EXPECT_EQ(job->parallel.chunks, 2);
  EXPECT_EQ(job->parallel.schedule, ScheduleKind::interleaved);
  EXPECT_EQ(job->parallel.layout, Layout::classic);
  EXPECT_EQ(job->train.microbatches, 2);  // the whole batch's, both replicas'
  EXPECT_EQ(job->train.batch, 16);
  // Forwards offload nothing, and "auto" needs planned stages.
  EXPECT_EQ(job->offload.tier, OffloadTier::none);
  const auto layout = requested_layout(*job, 2);
  ASSERT_TRUE(layout.ok()) << layout.status().message();
  EXPECT_EQ(layout->pipeline_ranks, 1);
  EXPECT_EQ(layout->microbatch_samples, 8);
  EXPECT_EQ(layout->schedule, "interleaved-1f1b");
}

TEST(StoredPlan, ReadsEverySchedulePipeFbAndThePlannersChoicesOfModel) {
  const auto onefb =
      job_with_plan(planned_job(), record({"1f1b", 2, 1, 1, 4, 4, {{0, 2}, {3, 5}}, {1, 0}}), 2);
  ASSERT_TRUE(onefb.ok()) << onefb.status().message();
  EXPECT_EQ(onefb->parallel.schedule, ScheduleKind::one_f_one_b);
  EXPECT_EQ(onefb->train.microbatches, 4);
  const auto zb =
      job_with_plan(planned_job(), record({"zb-h1", 2, 1, 1, 4, 4, {{0, 2}, {3, 5}}, {0, 1}}), 2);
  ASSERT_TRUE(zb.ok()) << zb.status().message();
  EXPECT_EQ(zb->parallel.schedule, ScheduleKind::zb_h1);
  // PipeFB: a stage's forward and backward on two ranks, as the planner recorded it on 4.
  const auto fb =
      job_with_plan(planned_job(), record({"pipefb", 1, 2, 1, 1, 8, {{0, 5}}, {1, 0, 3, 2}}), 4);
  ASSERT_TRUE(fb.ok()) << fb.status().message();
  EXPECT_EQ(fb->parallel.layout, Layout::pipefb);
  EXPECT_EQ(fb->parallel.replicas, 2);

  // Cut layers and a chunked head the planner chose become the model's.
  JobConfig choosing = planned_job();
  choosing.model.split_layers_auto = true;
  choosing.model.head_chunk_auto = true;
  nlohmann::json cut = record({"1f1b", 2, 1, 1, 4, 4, {{0, 2}, {3, 6}}, {0, 1}},
                              std::string(kModel) + " head_chunk_rows=128 split=1:2");
  cut["layout"]["split_layers"] = {{1, 2}};
  cut["layout"]["head_chunk_rows"] = 128;
  const auto chose = job_with_plan(choosing, cut, 2);
  ASSERT_TRUE(chose.ok()) << chose.status().message();
  EXPECT_EQ(chose->model.split_layers, (std::vector<std::array<int, 2>>{{1, 2}}));
  EXPECT_FALSE(chose->model.split_layers_auto);
  EXPECT_EQ(chose->model.head_chunk_rows, 128);
  EXPECT_FALSE(chose->model.head_chunk_auto);
}

void expect_refused(const Result<JobConfig>& job, const std::string& message) {
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(job.status().message(), message);
}

TEST(StoredPlan, RefusesAPlanForAnotherModelRankCountOrBatch) {
  JobConfig wider = planned_job();
  wider.model.d_model = 256;
  expect_refused(job_with_plan(wider, record(kInterleaved), 2),
                 std::string("it was made for the model \"") + kModel +
                     "\", not \"gpt layers=4 d_model=256 heads=4 seq=64 vocab=256\"");
  // A model's name that merely begins alike is another model.
  expect_refused(
      job_with_plan(planned_job(), record(kInterleaved, std::string(kModel) + "0"), 2),
      std::string("it was made for the model \"") + kModel + "0\", not \"" + kModel + "\"");
  expect_refused(job_with_plan(planned_job(), record(kInterleaved), 4),
                 "it was made for 2 ranks, not 4");
  JobConfig smaller = planned_job();
  smaller.train.batch = 8;
  expect_refused(job_with_plan(smaller, record(kInterleaved), 2),
                 "it was made for train.batch = 16, not 8");
}

TEST(StoredPlan, RefusesARecordItCannotRead) {
  nlohmann::json unknown = record(kInterleaved);
  unknown["layout"]["schedule"] = "round-robin";
  expect_refused(job_with_plan(planned_job(), unknown, 2),
                 "it was made with the schedule \"round-robin\", which spillway does not know");
  nlohmann::json no_layout = record(kInterleaved);
  no_layout.erase("layout");
  const auto missing = job_with_plan(planned_job(), no_layout, 2);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message().rfind("it is no plan spillway wrote (", 0), 0u)
      << missing.status().message();
  // Stages that do not cover the model's six blocks.
  const auto short_stages =
      job_with_plan(planned_job(), record({"1f1b", 2, 1, 1, 4, 4, {{0, 2}, {3, 4}}, {0, 1}}), 2);
  ASSERT_FALSE(short_stages.ok());
  EXPECT_EQ(short_stages.status().message().rfind("its layout does not fit the job: ", 0), 0u)
      << short_stages.status().message();
}

TEST(StoredPlan, PlanningKeysAreWhatAPlanDependsOn) {
  const JobConfig job = planned_job();
  const nlohmann::json keys = planning_keys(job);
  // What a resumed or longer run may change without a new plan.
  JobConfig longer = job;
  longer.train.steps = 1000;
  longer.train.lr = 1e-4;
  longer.output.dir = "elsewhere";
  longer.output.checkpoint_every = 7;
  longer.eval.every = 10;
  longer.data.source = DataKind::synthetic;
  EXPECT_EQ(planning_keys(longer), keys);
  // What the plan was made for.
  std::vector<JobConfig> changed(7, job);
  changed[0].memory.cap = std::size_t{1} << 30;
  changed[1].model.d_model = 256;
  changed[2].train.batch = 32;
  changed[3].train.optimizer = OptimizerKind::sgd;
  changed[4].offload.tier = OffloadTier::file;
  changed[5].threads.count = 2;
  changed[6].parallel.layout = Layout::pipefb;
  for (std::size_t i = 0; i < changed.size(); ++i) {
    EXPECT_NE(planning_keys(changed[i]), keys) << "change " << i;
  }
}

}  // namespace
}  // namespace spw
