#include <gtest/gtest.h>

#include <algorithm>

#include "kernels/numa_allocator.hpp"
#include "runtime/model.hpp"
#include "runtime/profiler.hpp"

namespace spw {
namespace {

TrainSettings tiny_gpt() {
  TrainSettings s;
  s.model.kind = "gpt";
  s.model.gpt.layers = 2;
  s.model.gpt.d_model = 32;
  s.model.gpt.heads = 2;
  s.model.gpt.seq = 16;
  s.data.source = DataKind::synthetic;
  s.optimizer.kind = "adamw";
  return s;
}

TEST(Profiler, MeasuresEveryBlockWithItsBytes) {
  const TrainSettings settings = tiny_gpt();
  ProfileOptions options;
  options.microbatch_samples = 4;
  options.repeats = 3;
  auto profile = profile_model(settings, options);
  ASSERT_TRUE(profile.ok()) << profile.status().message();
  ASSERT_EQ(profile->blocks.size(), 4u);
  EXPECT_EQ(profile->blocks[0].name, "embedding");
  EXPECT_EQ(profile->blocks[3].name, "head");
  EXPECT_EQ(profile->microbatch_samples, 4);
  // Named after the model's shape, so a profile of another model is told apart.
  EXPECT_EQ(profile->model, "gpt layers=2 d_model=32 heads=2 seq=16 vocab=256");

  auto model = Model::build(settings.model);
  ASSERT_TRUE(model.ok());
  for (std::size_t b = 0; b < profile->blocks.size(); ++b) {
    const auto& block = profile->blocks[b];
    std::int64_t parameters = 0;
    for (auto& p : (*model)->block(b).parameters()) {
      parameters += static_cast<std::int64_t>(p.value->bytes());
    }
    EXPECT_EQ(block.parameter_bytes, parameters) << block.name;
    EXPECT_EQ(block.optimizer_state_bytes, 2 * parameters) << block.name;  // AdamW: m and v
    EXPECT_GT(block.forward_s, 0) << block.name;
  }
  // Transformer blocks and the embedding hand on [4 * 16 tokens, 32] floats; the head nothing.
  EXPECT_EQ(profile->blocks[1].activation_bytes, 4 * 16 * 32 * 4);
  EXPECT_EQ(profile->blocks[3].activation_bytes, 0);
  // Per microbatch of n = 64 rows and d = 32, a transformer block saves 15 n d + 4 n floats
  // and the attention's log-sum-exp (4 samples x 2 heads x 16 positions), and keeps 10 n d
  // floats of gradients from B for W; the head saves n (d + 2) + n x 256 (its logits, whose
  // gradient B writes in their place) and keeps the LayerNorm's gradient; the embedding keeps
  // nothing.
  const std::int64_t n = 64, d = 32, vocab = 256;
  EXPECT_EQ(profile->blocks[1].stash_bytes, 4 * (15 * n * d + 4 * n + 4 * 2 * 16));
  EXPECT_EQ(profile->blocks[1].backward_bytes, 4 * 10 * n * d);
  EXPECT_EQ(profile->blocks[3].stash_bytes, 4 * (n * d + 2 * n + n * vocab));
  EXPECT_EQ(profile->blocks[3].backward_bytes, 4 * n * d);
  EXPECT_EQ(profile->blocks[0].stash_bytes, 0);
  EXPECT_EQ(profile->blocks[0].backward_bytes, 0);
  // A transformer block reuses two buffers in its backward for the whole run, n x 4d and
  // n x d; the others none. Attention allocates per-thread scratch for each call.
  EXPECT_EQ(profile->blocks[1].workspace_bytes, 4 * 5 * n * d);
  EXPECT_EQ(profile->blocks[0].workspace_bytes, 0);
  EXPECT_EQ(profile->blocks[3].workspace_bytes, 0);
  EXPECT_GT(profile->blocks[1].scratch_bytes, 0);
  EXPECT_GT(profile->optimizer_step_s, 0);
  // Every block's passes are timed on one sample too, for the planner's smaller microbatches.
  for (const auto& block : profile->blocks) {
    ASSERT_TRUE(block.one_sample.has_value()) << block.name;
    EXPECT_GT(block.one_sample->forward_s, 0) << block.name;
    EXPECT_GE(block.one_sample->backward_weight_s, 0) << block.name;
  }
}

TEST(Profiler, AOneSampleProfileHasNoSeparateOneSampleTimes) {
  ProfileOptions options;
  options.microbatch_samples = 1;
  options.repeats = 1;
  auto profile = profile_model(tiny_gpt(), options);
  ASSERT_TRUE(profile.ok()) << profile.status().message();
  for (const auto& block : profile->blocks)
    EXPECT_FALSE(block.one_sample.has_value()) << block.name;
}

TEST(Profiler, SweepsChangeWhenBlocksAreTimedNotWhatIsMeasured) {
  ProfileOptions one;
  one.microbatch_samples = 2;
  one.repeats = 4;
  one.sweeps = 1;
  ProfileOptions spread = one;
  spread.sweeps = 3;  // 2 + 1 + 1 timed runs per pass
  ProfileOptions more = one;
  more.repeats = 2;
  more.sweeps = 5;  // at most one sweep per timed run
  const auto a = profile_model(tiny_gpt(), one);
  const auto b = profile_model(tiny_gpt(), spread);
  const auto c = profile_model(tiny_gpt(), more);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  for (const auto* p : {&*b, &*c}) {
    ASSERT_EQ(p->blocks.size(), a->blocks.size());
    for (std::size_t i = 0; i < a->blocks.size(); ++i) {
      EXPECT_EQ(p->blocks[i].name, a->blocks[i].name);
      EXPECT_EQ(p->blocks[i].stash_bytes, a->blocks[i].stash_bytes);
      EXPECT_EQ(p->blocks[i].parameter_bytes, a->blocks[i].parameter_bytes);
      EXPECT_EQ(p->blocks[i].optimizer_state_bytes, a->blocks[i].optimizer_state_bytes);
      EXPECT_GT(p->blocks[i].forward_s, 0);
      EXPECT_GT(p->blocks[i].backward_weight_s, 0);
    }
  }
}

// Blocks of one kind are measured once and the others take its figures, so a deep model
// profiles as fast as a shallow one. Measured times never repeat to the last bit by chance:
// equal figures show one measurement shared, unequal ones separate measurements.
TEST(Profiler, BlocksOfOneKindShareOneMeasurement) {
  TrainSettings settings = tiny_gpt();
  settings.model.gpt.layers = 5;
  settings.model.splits = {{1, 1}, {3, 1}};
  ProfileOptions options;
  options.microbatch_samples = 2;
  options.repeats = 3;
  const auto profile = profile_model(settings, options);
  ASSERT_TRUE(profile.ok()) << profile.status().message();
  ASSERT_EQ(profile->blocks.size(), 9u);
  const auto same = [](const sched::BlockProfile& a, const sched::BlockProfile& b) {
    return a.forward_s == b.forward_s && a.backward_input_s == b.backward_input_s &&
           a.backward_weight_s == b.backward_weight_s &&
           a.one_sample->forward_s == b.one_sample->forward_s && a.stash_bytes == b.stash_bytes &&
           a.scratch_bytes == b.scratch_bytes && a.scratch_growth_bytes == b.scratch_growth_bytes &&
           a.workspace_bytes == b.workspace_bytes && a.parameter_bytes == b.parameter_bytes;
  };
  const auto& blocks = profile->blocks;
  const std::vector<std::string> names = settings.model.block_names();
  for (std::size_t b = 0; b < blocks.size(); ++b) EXPECT_EQ(blocks[b].name, names[b]);
  // embedding, blocks.0, blocks.1.front, blocks.1.back, blocks.2, blocks.3.front,
  // blocks.3.back, blocks.4, head
  for (const std::size_t layer : {4u, 7u}) EXPECT_TRUE(same(blocks[1], blocks[layer])) << layer;
  EXPECT_TRUE(same(blocks[2], blocks[5]));
  EXPECT_TRUE(same(blocks[3], blocks[6]));
  EXPECT_FALSE(same(blocks[1], blocks[3]));
  EXPECT_NE(blocks[2].forward_s, blocks[3].forward_s);
  EXPECT_NE(blocks[0].forward_s, blocks[8].forward_s);
}

// Wide enough that the Linear weight gradient goes through reusable scratch.
TrainSettings wide_enough_for_scratch() {
  TrainSettings s = tiny_gpt();
  s.model.gpt.d_model = 128;
  s.model.gpt.heads = 4;
  return s;
}

ProfileOptions one_run_of(std::int64_t samples) {
  ProfileOptions options;
  options.microbatch_samples = samples;
  options.repeats = 1;
  return options;
}

// The kernels' reusable scratch outlives a profile: a second profile in the same process
// (a test after another, a C ABI caller planning again) must still count it, or a plan
// made from it under a cap runs past the cap by that much.
TEST(Profiler, ASecondProfileInTheProcessCountsTheScratchTheFirstLeft) {
  const TrainSettings settings = wide_enough_for_scratch();
  ProfileOptions options = one_run_of(2);
  const auto first = profile_model(settings, options);
  ASSERT_TRUE(first.ok()) << first.status().message();
  ASSERT_GT(scratch_buffer_bytes(), 0u) << "no reusable scratch: the test shows nothing";
  const auto second = profile_model(settings, options);
  ASSERT_TRUE(second.ok()) << second.status().message();
  std::int64_t first_most = 0, second_most = 0;
  for (std::size_t b = 0; b < first->blocks.size(); ++b) {
    first_most = std::max(first_most, first->blocks[b].scratch_bytes);
    second_most = std::max(second_most, second->blocks[b].scratch_bytes);
    EXPECT_EQ(second->blocks[b].workspace_bytes, first->blocks[b].workspace_bytes) << b;
  }
  // What a rank adds is the largest block's; it holds the scratch once.
  EXPECT_EQ(second_most, first_most);
  EXPECT_GE(first_most, static_cast<std::int64_t>(scratch_buffer_bytes()));
}

// The growth at twice the samples is measured, and bounds what a profile at that size sees;
// most scratch is per thread or per weight, so a transformer block's grows by less than all.
TEST(Profiler, ScratchGrowthAtTwiceTheSamplesBoundsAProfileThere) {
  const TrainSettings settings = wide_enough_for_scratch();
  ProfileOptions options = one_run_of(2);
  const auto once = profile_model(settings, options);
  ASSERT_TRUE(once.ok()) << once.status().message();
  options.microbatch_samples = 4;
  // The second profile's own run at 8 samples grows the reusable buffers further, and its
  // scratch counts that: take it off to compare with what 4 samples need.
  const auto kept_before = static_cast<std::int64_t>(scratch_buffer_bytes());
  const auto twice = profile_model(settings, options);
  ASSERT_TRUE(twice.ok()) << twice.status().message();
  const std::int64_t kept_by_twice =
      static_cast<std::int64_t>(scratch_buffer_bytes()) - kept_before;
  for (std::size_t b = 0; b < once->blocks.size(); ++b) {
    const sched::BlockProfile& block = once->blocks[b];
    ASSERT_TRUE(block.scratch_growth_bytes.has_value()) << block.name;
    EXPECT_GE(block.scratch_bytes + *block.scratch_growth_bytes,
              twice->blocks[b].scratch_bytes - kept_by_twice)
        << block.name;
  }
  EXPECT_LT(*once->blocks[1].scratch_growth_bytes, once->blocks[1].scratch_bytes);
}

// The chunked head's [chunk, vocab] buffer stops growing at head_chunk_rows rows: its profile
// says so, and the workspace it measures on 2 samples (32 rows) holds the buffer for those
// rows, which is what the planner scales from. Only the head has such a part.
TEST(Profiler, TheChunkedHeadsBufferIsAWorkspaceBoundedAtItsChunk) {
  TrainSettings settings = tiny_gpt();
  settings.model.gpt.vocab = 512;
  settings.model.gpt.head_chunk_rows = 24;
  const auto profile = profile_model(settings, one_run_of(2));
  ASSERT_TRUE(profile.ok()) << profile.status().message();
  const sched::BlockProfile& head = profile->blocks.back();
  ASSERT_EQ(head.name, "head");
  EXPECT_EQ(head.bounded_workspace_per_sample, 16 * 512 * 4);  // seq rows of vocab floats
  EXPECT_EQ(head.bounded_workspace_most, 24 * 512 * 4);
  EXPECT_EQ(sched::bounded_workspace_bytes(head, 2), 24 * 512 * 4);
  EXPECT_GE(head.workspace_bytes, 24 * 512 * 4);
  for (std::size_t b = 0; b + 1 < profile->blocks.size(); ++b) {
    EXPECT_EQ(profile->blocks[b].bounded_workspace_most, 0) << profile->blocks[b].name;
  }
  settings.model.gpt.head_chunk_rows = 0;
  const auto whole = profile_model(settings, one_run_of(2));
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  EXPECT_EQ(whole->blocks.back().bounded_workspace_most, 0);
}

TEST(Profiler, RejectsAnEmptyMicrobatch) {
  ProfileOptions options;
  options.microbatch_samples = 0;
  auto profile = profile_model(tiny_gpt(), options);
  ASSERT_FALSE(profile.ok());
  EXPECT_EQ(profile.status().message(),
            "profiling needs microbatch_samples >= 1, repeats >= 1 and warmup >= 0");
}

}  // namespace
}  // namespace spw
