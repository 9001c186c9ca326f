// model.head_chunk_rows = "auto": the probe the chunked head is profiled on, the profile the
// planner reads it into, and the plan it keeps: the faster of those that fit.
#include <gtest/gtest.h>

#include <string>

#include "partition/planner_test_support.hpp"
#include "runtime/head_choice.hpp"

namespace spw {
namespace {

TrainSettings gpt_choosing_its_head() {
  TrainSettings s;
  s.model.kind = "gpt";
  s.model.gpt.layers = 2;
  s.model.gpt.heads = 2;
  s.model.gpt.d_model = 32;
  s.model.gpt.seq = 16;
  s.model.gpt.vocab = 4096;
  s.batch = 8;
  s.microbatches = 1;
  s.head_chunk_auto = true;
  return s;
}

sched::BlockProfile block(const std::string& name, double forward_s, double backward_s,
                          std::int64_t stash_bytes) {
  sched::BlockProfile b;
  b.name = name;
  b.forward_s = forward_s;
  b.backward_input_s = b.backward_weight_s = backward_s;
  b.stash_bytes = stash_bytes;
  b.activation_bytes = 8 << 10;
  b.parameter_bytes = b.gradient_bytes = 16 << 10;
  return b;
}

// The job's model measured on 8 samples: a whole head that stashes 8 MiB of logits, 1 MiB a
// sample.
sched::ModelProfile whole_head_profile(const TrainSettings& s) {
  sched::ModelProfile p;
  p.model = profiled_model(s).describe();
  p.microbatch_samples = 8;
  p.blocks = {block("embedding", 1e-4, 1e-4, 0), block("blocks.0", 1e-3, 1e-3, 64 << 10),
              block("blocks.1", 1e-3, 1e-3, 64 << 10), block("head", 1e-3, 1e-3, 8 << 20)};
  return p;
}

// The one-layer probe with its head chunked: the backward's work moved into the forward,
// `forward_s` in all, and 64 KiB stashed.
sched::ModelProfile chunked_probe(const TrainSettings& s, double forward_s) {
  sched::ModelProfile p;
  p.model = chunked_head_probe(s).model.describe();
  p.microbatch_samples = 8;
  p.blocks = {block("embedding", 1e-4, 1e-4, 0), block("blocks.0", 1e-3, 1e-3, 64 << 10),
              block("head", forward_s, 1e-5, 64 << 10)};
  return p;
}

sched::RankTopology one_rank() {
  auto t = sched::synthetic_topology(1, 1, {1e9, 1e-6}, {1e9, 1e-6});
  EXPECT_TRUE(t.ok()) << t.status().message();
  return *t;
}

TEST(HeadChoice, TheProbeIsTheJobsGptWithOneLayerAndItsHeadChunked) {
  TrainSettings s = gpt_choosing_its_head();
  s.model.gpt.layers = 6;
  s.model.splits = {{2, 1}};
  const ModelSpec probe = chunked_head_probe(s).model;
  EXPECT_EQ(probe.describe(), "gpt layers=1 d_model=32 heads=2 seq=16 vocab=4096 head_chunk_rows=" +
                                  std::to_string(kAutoHeadChunkRows));
  EXPECT_TRUE(plans_head_chunks(s));
  s.head_chunk_auto = false;
  EXPECT_FALSE(plans_head_chunks(s));
}

TEST(HeadChoice, TheChunkedProfileIsTheWholeOneWithTheProbesHead) {
  const TrainSettings s = gpt_choosing_its_head();
  const sched::ModelProfile whole = whole_head_profile(s);
  auto chunked = with_chunked_head(s, whole, chunked_probe(s, 3e-3));
  ASSERT_TRUE(chunked.ok()) << chunked.status().message();
  EXPECT_EQ(chunked->model, "gpt layers=2 d_model=32 heads=2 seq=16 vocab=4096 head_chunk_rows=" +
                                std::to_string(kAutoHeadChunkRows));
  ASSERT_EQ(chunked->blocks.size(), whole.blocks.size());
  for (std::size_t i = 0; i + 1 < whole.blocks.size(); ++i) {
    EXPECT_EQ(chunked->blocks[i].name, whole.blocks[i].name);
    EXPECT_EQ(chunked->blocks[i].forward_s, whole.blocks[i].forward_s);
  }
  EXPECT_EQ(chunked->blocks.back().name, "head");
  EXPECT_EQ(chunked->blocks.back().forward_s, 3e-3);
  EXPECT_EQ(chunked->blocks.back().stash_bytes, 64 << 10);

  sched::ModelProfile headless = chunked_probe(s, 3e-3);
  headless.blocks.pop_back();
  EXPECT_EQ(with_chunked_head(s, whole, headless).status().message(),
            "choosing the head: the profile of " + headless.model + " has no block \"head\"");
}

TEST(HeadChoice, KeepsTheFasterPlanThatFits) {
  const TrainSettings s = gpt_choosing_its_head();
  const sched::ModelProfile whole = whole_head_profile(s);
  // Chunked, the head's passes take 3 + 0.02 ms against 3: without a cap the whole head wins.
  const sched::ModelProfile slower = *with_chunked_head(s, whole, chunked_probe(s, 3e-3));
  auto planned = plan_model_and_head(s, whole, &slower, one_rank(), {});
  ASSERT_TRUE(planned.ok()) << planned.status().message();
  EXPECT_EQ(planned->head_chunk_rows, 0);
  EXPECT_NE(planned->plan.explanation.find("model.head_chunk_rows = \"auto\": head whole "),
            std::string::npos)
      << planned->plan.explanation;
  EXPECT_NE(planned->plan.explanation.find("kept the head whole"), std::string::npos);
  const double whole_s = planned->plan.iteration_s;

  // Under 768 KiB a rank: the whole head stashes 1 MiB for each sample in flight, so only
  // the chunked one fits, slower or not.
  TrainSettings capped = s;
  capped.memory_cap = std::size_t{768} << 10;
  planned = plan_model_and_head(capped, whole, &slower, one_rank(), {});
  ASSERT_TRUE(planned.ok()) << planned.status().message();
  EXPECT_EQ(planned->head_chunk_rows, kAutoHeadChunkRows);
  EXPECT_EQ(planned->plan.schedule.find("pipefb"), std::string::npos);
  EXPECT_NE(planned->plan.explanation.find("head whole no plan ("), std::string::npos)
      << planned->plan.explanation;
  EXPECT_NE(planned->plan.explanation.find("kept the head chunked"), std::string::npos);
  EXPECT_GT(planned->plan.iteration_s, whole_s);
  EXPECT_EQ(planned->profile.model, slower.model);

  // Chunked and faster (2 ms forward): kept without a cap.
  const sched::ModelProfile faster = *with_chunked_head(s, whole, chunked_probe(s, 2e-3));
  planned = plan_model_and_head(s, whole, &faster, one_rank(), {});
  ASSERT_TRUE(planned.ok()) << planned.status().message();
  EXPECT_EQ(planned->head_chunk_rows, kAutoHeadChunkRows);
  EXPECT_LT(planned->plan.iteration_s, (1 - kHeadChoiceMargin) * whole_s);

  // Faster by less than the margin (its passes 2.97 + 0.02 ms against 3): the whole head.
  const sched::ModelProfile barely = *with_chunked_head(s, whole, chunked_probe(s, 2.97e-3));
  TrainSettings chunked = s;
  chunked.model.gpt.head_chunk_rows = kAutoHeadChunkRows;
  const auto on_its_own = plan_model(chunked, barely, one_rank(), {});
  ASSERT_TRUE(on_its_own.ok()) << on_its_own.status().message();
  EXPECT_LT(on_its_own->plan.iteration_s, whole_s);
  planned = plan_model_and_head(s, whole, &barely, one_rank(), {});
  ASSERT_TRUE(planned.ok()) << planned.status().message();
  EXPECT_EQ(planned->head_chunk_rows, 0);
  EXPECT_EQ(planned->plan.iteration_s, whole_s);
  EXPECT_NE(planned->plan.explanation.find("kept the head whole"), std::string::npos);
}

TEST(HeadChoice, WhenNeitherFitsTheErrorGivesBothReasons) {
  TrainSettings s = gpt_choosing_its_head();
  s.memory_cap = std::size_t{4} << 10;
  const sched::ModelProfile whole = whole_head_profile(s);
  const sched::ModelProfile chunked = *with_chunked_head(s, whole, chunked_probe(s, 3e-3));
  auto planned = plan_model_and_head(s, whole, &chunked, one_rank(), {});
  ASSERT_FALSE(planned.ok());
  const std::string& message = planned.status().message();
  EXPECT_EQ(message.rfind("no plan with the head whole (", 0), 0u) << message;
  EXPECT_NE(message.find(") nor chunked at " + std::to_string(kAutoHeadChunkRows) + " rows ("),
            std::string::npos)
      << message;
}

TEST(HeadChoice, WithoutAutoItIsPlanModel) {
  TrainSettings s = gpt_choosing_its_head();
  s.head_chunk_auto = false;
  const sched::ModelProfile whole = whole_head_profile(s);
  auto planned = plan_model_and_head(s, whole, nullptr, one_rank(), {});
  ASSERT_TRUE(planned.ok()) << planned.status().message();
  auto direct = plan_model(s, whole, one_rank(), {});
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ(planned->plan.iteration_s, direct->plan.iteration_s);
  EXPECT_EQ(planned->plan.explanation, direct->plan.explanation);
  EXPECT_EQ(planned->head_chunk_rows, 0);
}

}  // namespace
}  // namespace spw
