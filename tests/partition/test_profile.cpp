// profile.json: round trips and the one-line errors a hand-edited or truncated file gets.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "partition/profile.hpp"

namespace spw::sched {
namespace {

ModelProfile two_blocks() {
  ModelProfile p;
  p.model = "tiny";
  p.microbatch_samples = 4;
  p.threads = 2;
  p.host = "node17";
  p.blas_kernels = "skx";
  p.optimizer_step_s = 0.25;
  p.blocks = {{"embed", 0.001, 0.002, 0.003, 10, 20, 30, 40, 50, 60, 70, 80},
              {"head", 0.125, 1e-9, 0, 1, 2, 3, 4, std::int64_t{1} << 40, 5, 6, 7}};
  p.blocks[1].scratch_growth_bytes = 3;  // the embedding's left unmeasured
  p.blocks[1].one_sample = PassSeconds{0.0625, 1e-10, 0};  // likewise
  p.blocks[1].bounded_workspace_per_sample = 1;            // 3 of its 6 bytes on 4 samples
  p.blocks[1].bounded_workspace_most = 3;
  return p;
}

void expect_same(const ModelProfile& a, const ModelProfile& b) {
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.microbatch_samples, b.microbatch_samples);
  EXPECT_EQ(a.threads, b.threads);
  EXPECT_EQ(a.host, b.host);
  EXPECT_EQ(a.blas_kernels, b.blas_kernels);
  EXPECT_EQ(a.optimizer_step_s, b.optimizer_step_s);
  ASSERT_EQ(a.blocks.size(), b.blocks.size());
  for (std::size_t i = 0; i < a.blocks.size(); ++i) {
    const BlockProfile &x = a.blocks[i], &y = b.blocks[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.forward_s, y.forward_s);  // exact: JSON keeps every digit of a double
    EXPECT_EQ(x.backward_input_s, y.backward_input_s);
    EXPECT_EQ(x.backward_weight_s, y.backward_weight_s);
    EXPECT_EQ(x.stash_bytes, y.stash_bytes);
    EXPECT_EQ(x.activation_bytes, y.activation_bytes);
    EXPECT_EQ(x.parameter_bytes, y.parameter_bytes);
    EXPECT_EQ(x.gradient_bytes, y.gradient_bytes);
    EXPECT_EQ(x.optimizer_state_bytes, y.optimizer_state_bytes);
    EXPECT_EQ(x.backward_bytes, y.backward_bytes);
    EXPECT_EQ(x.workspace_bytes, y.workspace_bytes);
    EXPECT_EQ(x.scratch_bytes, y.scratch_bytes);
    EXPECT_EQ(x.scratch_growth_bytes, y.scratch_growth_bytes);
    EXPECT_EQ(x.bounded_workspace_per_sample, y.bounded_workspace_per_sample);
    EXPECT_EQ(x.bounded_workspace_most, y.bounded_workspace_most);
    ASSERT_EQ(x.one_sample.has_value(), y.one_sample.has_value());
    if (x.one_sample) {
      EXPECT_EQ(x.one_sample->forward_s, y.one_sample->forward_s);
      EXPECT_EQ(x.one_sample->backward_input_s, y.one_sample->backward_input_s);
      EXPECT_EQ(x.one_sample->backward_weight_s, y.one_sample->backward_weight_s);
    }
  }
}

// Profiles written before the one-sample times were measured lack them; present, they are
// times like the others.
TEST(Profile, OneSampleTimesAreOptionalAndChecked) {
  ModelProfile p = two_blocks();
  const auto back = profile_from_json(profile_to_json(p), "mem");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_FALSE(back->blocks[0].one_sample.has_value());
  ASSERT_TRUE(back->blocks[1].one_sample.has_value());
  EXPECT_EQ(back->blocks[1].one_sample->forward_s, 0.0625);
  p.blocks[1].one_sample->backward_input_s = -1;
  EXPECT_EQ(check_profile(p).message(),
            "profile: block 1 (head) one_sample backward_input_s = -1 must be a finite number of "
            "seconds >= 0");
  std::string text = profile_to_json(two_blocks());
  const std::string key = "\"one_sample\": {";
  ASSERT_NE(text.find(key), std::string::npos) << text;
  text.replace(text.find(key), key.size(), "\"one_sample\": 3, \"unused\": {");
  EXPECT_EQ(profile_from_json(text, "p.json").status().message(),
            "p.json: block 1: one_sample must be an object, got 3");
}

// The growth is optional: profiles written before it was measured lack it, and the planner
// then scales all of the scratch. Present, it must be a byte count.
TEST(Profile, ScratchGrowthIsOptionalAndChecked) {
  ModelProfile p = two_blocks();
  const auto back = profile_from_json(profile_to_json(p), "profile");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_FALSE(back->blocks[0].scratch_growth_bytes.has_value());
  EXPECT_EQ(back->blocks[1].scratch_growth_bytes, 3);
  EXPECT_EQ(profile_to_json(p).find("scratch_growth_bytes"),
            profile_to_json(p).rfind("scratch_growth_bytes"));  // written once, for the head
  p.blocks[1].scratch_growth_bytes = -1;
  EXPECT_EQ(check_profile(p).message(),
            "profile: block 1 (head) scratch_growth_bytes = -1 must be >= 0");
}

// The part of a workspace that stops growing (the chunked head's buffer): absent it is none,
// and present it must be byte counts that fit in the workspace measured.
TEST(Profile, BoundedWorkspaceIsOptionalAndChecked) {
  ModelProfile p = two_blocks();
  const auto back = profile_from_json(profile_to_json(p), "profile");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->blocks[0].bounded_workspace_most, 0);
  EXPECT_EQ(back->blocks[1].bounded_workspace_per_sample, 1);
  EXPECT_EQ(back->blocks[1].bounded_workspace_most, 3);
  EXPECT_EQ(profile_to_json(p).find("bounded_workspace"),
            profile_to_json(p).rfind("bounded_workspace"));  // written once, for the head
  EXPECT_EQ(bounded_workspace_bytes(p.blocks[1], 2), 2);
  EXPECT_EQ(bounded_workspace_bytes(p.blocks[1], 4), 3);
  p.blocks[1].bounded_workspace_per_sample = 2;
  p.blocks[1].bounded_workspace_most = 7;
  EXPECT_EQ(check_profile(p).message(),
            "profile: block 1 (head) bounded_workspace holds 7 bytes on the profiled microbatch, "
            "more than its workspace_bytes = 6");
  p.blocks[1].bounded_workspace_per_sample = -1;
  EXPECT_EQ(check_profile(p).message(),
            "profile: block 1 (head) bounded_workspace per_sample_bytes = -1 must be >= 0");
  std::string text = profile_to_json(two_blocks());
  const std::string key = "\"bounded_workspace\": {";
  ASSERT_NE(text.find(key), std::string::npos) << text;
  text.replace(text.find(key), key.size(), "\"bounded_workspace\": 3, \"unused\": {");
  EXPECT_EQ(profile_from_json(text, "p.json").status().message(),
            "p.json: block 1: bounded_workspace must be an object, got 3");
}

TEST(Profile, RoundTripsThroughJsonTextAndFiles) {
  const ModelProfile p = two_blocks();
  const auto back = profile_from_json(profile_to_json(p), "profile");
  ASSERT_TRUE(back.ok()) << back.status().message();
  expect_same(p, *back);

  const std::string path = ::testing::TempDir() + "spillway_profile.json";
  ASSERT_TRUE(write_profile(path, p).ok());
  const auto read = read_profile(path);
  ASSERT_TRUE(read.ok()) << read.status().message();
  expect_same(p, *read);
  std::remove(path.c_str());
}

TEST(Profile, OptionalKeysDefault) {
  const auto p = profile_from_json(R"({"version": 2, "microbatch_samples": 1, "threads": 1,
      "blocks": [{"name": "a", "forward_s": 1, "backward_input_s": 1, "backward_weight_s": 1,
       "stash_bytes": 1, "backward_bytes": 1, "activation_bytes": 1, "workspace_bytes": 0,
       "scratch_bytes": 0, "parameter_bytes": 1, "gradient_bytes": 1,
       "optimizer_state_bytes": 0}]})",
                                   "p.json");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->model, "");
  EXPECT_EQ(p->host, "");
  EXPECT_EQ(p->blas_kernels, "");
  EXPECT_EQ(measured_with(*p), "1 thread(s)");
  EXPECT_EQ(p->optimizer_step_s, 0);
  EXPECT_EQ(p->blocks[0].forward_s, 1.0);
}

TEST(Profile, SaysHowItWasMeasured) {
  ModelProfile p = two_blocks();
  EXPECT_EQ(measured_with(p), "2 thread(s) with BLIS's skx kernels on node17");
  p.host.clear();
  EXPECT_EQ(measured_with(p), "2 thread(s) with BLIS's skx kernels");
  std::string text = profile_to_json(two_blocks());
  text.replace(text.find("\"skx\""), 5, "7");
  const auto typed = profile_from_json(text, "p.json");
  ASSERT_FALSE(typed.ok());
  EXPECT_EQ(typed.status().message(), "p.json: \"blas_kernels\" must be a string, got 7");
}

TEST(Profile, AMissingKeyIsNamedWithItsBlock) {
  std::string text = profile_to_json(two_blocks());
  const auto at = text.rfind("\"stash_bytes\"");
  text.replace(at, 13, "\"stash_byte\"");
  const auto p = profile_from_json(text, "p.json");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::not_found);
  EXPECT_EQ(p.status().message(), "p.json: block 1: missing key \"stash_bytes\"");

  const auto top = profile_from_json(R"({"version": 2, "threads": 1, "blocks": []})", "p.json");
  EXPECT_EQ(top.status().message(), "p.json: missing key \"microbatch_samples\"");
}

TEST(Profile, WrongTypesAndBadValuesAreOneLineNamingTheValue) {
  EXPECT_EQ(profile_from_json("{\"threads\": ", "p.json").status().message(),
            "p.json: not valid JSON");
  EXPECT_EQ(
      profile_from_json(R"({"version": 2, "microbatch_samples": "4", "threads": 1, "blocks": []})",
                        "p.json")
          .status()
          .message(),
      "p.json: \"microbatch_samples\" must be an integer, got \"4\"");
  EXPECT_EQ(profile_from_json(
                R"({"version": 2, "microbatch_samples": 4, "threads": 1, "blocks": []})", "p.json")
                .status()
                .message(),
            "p.json: profile: no blocks; a model needs at least one");

  std::string text = profile_to_json(two_blocks());
  text.replace(text.find("0.125"), 5, "-0.125");
  EXPECT_EQ(profile_from_json(text, "p.json").status().message(),
            "p.json: profile: block 1 (head) forward_s = -0.125 must be a finite number of "
            "seconds >= 0");
}

// Version 1 files (no "version") lumped a block's bytes together and lack what the memory
// model needs: refused, saying to profile again; so are versions this build does not know.
TEST(Profile, OldAndUnknownVersionsAreRefusedSayingWhatToDo) {
  std::string text = profile_to_json(two_blocks());
  EXPECT_NE(text.find("\"version\": 2"), std::string::npos) << text;
  const std::string old = R"({"microbatch_samples": 1, "threads": 1, "blocks": []})";
  EXPECT_EQ(profile_from_json(old, "p.json").status().message(),
            "p.json: profile version 1 (no \"version\" key) lacks the backward, workspace and "
            "scratch bytes the memory model needs; run `spillway profile` again to write "
            "version 2");
  text.replace(text.find("\"version\": 2"), 12, "\"version\": 3");
  EXPECT_EQ(profile_from_json(text, "p.json").status().message(),
            "p.json: profile version 3 is newer than this spillway reads (2); profile again "
            "with this version");
  EXPECT_EQ(profile_from_json(R"({"version": "2"})", "p.json").status().message(),
            "p.json: \"version\" must be an integer, got \"2\"");
}

TEST(Profile, CheckRejectsNonFiniteNegativeAndEmpty) {
  ModelProfile p = two_blocks();
  p.blocks[0].backward_weight_s = std::numeric_limits<double>::infinity();
  EXPECT_EQ(check_profile(p).message(),
            "profile: block 0 (embed) backward_weight_s = inf must be a finite number of seconds "
            ">= 0");
  p = two_blocks();
  p.blocks[1].backward_input_s = std::nan("");
  EXPECT_NE(check_profile(p).message().find("block 1 (head) backward_input_s = nan"),
            std::string::npos);
  p = two_blocks();
  p.blocks[1].gradient_bytes = -1;
  EXPECT_EQ(check_profile(p).message(), "profile: block 1 (head) gradient_bytes = -1 must be >= 0");
  p = two_blocks();
  p.blocks[0].scratch_bytes = -2;
  EXPECT_EQ(check_profile(p).message(), "profile: block 0 (embed) scratch_bytes = -2 must be >= 0");
  p = two_blocks();
  p.microbatch_samples = 0;
  EXPECT_EQ(check_profile(p).message(),
            "profile: microbatch_samples = 0 must be >= 1 (the samples each measured pass "
            "processed)");
  p = two_blocks();
  p.threads = 0;
  EXPECT_EQ(check_profile(p).message(), "profile: threads = 0 must be >= 1");
  EXPECT_TRUE(check_profile(two_blocks()).ok());
}

TEST(Profile, AProfileOfAnotherModelOrMicrobatchIsRejectedSayingWhich) {
  const ModelProfile p = two_blocks();
  const std::vector<std::string> names = {"embed", "head"};
  EXPECT_TRUE(check_profile_matches(p, "tiny", names, 4, "p.json").ok());
  EXPECT_EQ(check_profile_matches(p, "small", names, 4, "p.json").message(),
            "p.json was made for the model \"tiny\", not the job's \"small\": profile this job "
            "with `spillway profile CONFIG` or omit the profile");
  EXPECT_EQ(check_profile_matches(p, "tiny", {"embed", "mid", "head"}, 4, "p.json").message(),
            "p.json has 2 blocks but the job's model has 3: profile this job with `spillway "
            "profile CONFIG` or omit the profile");
  EXPECT_EQ(check_profile_matches(p, "tiny", {"embed", "loss"}, 4, "p.json").message(),
            "p.json names block 1 \"head\" but the job's model calls it \"loss\": profile this "
            "job with `spillway profile CONFIG` or omit the profile");
  const Status batch = check_profile_matches(p, "tiny", names, 8, "p.json");
  EXPECT_EQ(batch.code(), StatusCode::invalid_argument);
  EXPECT_EQ(batch.message(),
            "p.json was measured on microbatches of 4 samples, the job's are 8 (train.batch / "
            "train.microbatches): profile this job with `spillway profile CONFIG` or omit the "
            "profile");
}

TEST(Profile, MedianOfConcurrentProfilesTakesEachTimesMedian) {
  std::vector<ModelProfile> ranks(3, two_blocks());
  ranks[0].blocks[0].forward_s = 3, ranks[1].blocks[0].forward_s = 1,
  ranks[2].blocks[0].forward_s = 2;
  ranks[0].blocks[1].backward_weight_s = 9, ranks[2].blocks[1].backward_weight_s = 0.5;
  ranks[1].optimizer_step_s = 0.75, ranks[2].optimizer_step_s = 0.5;
  const auto m = median_profile(ranks);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->blocks[0].forward_s, 2);
  EXPECT_EQ(m->blocks[1].backward_weight_s, 0.5);  // 0, 0.5, 9
  EXPECT_EQ(m->blocks[0].backward_input_s, 0.002);
  EXPECT_EQ(m->optimizer_step_s, 0.5);
  EXPECT_EQ(m->blocks[1].optimizer_state_bytes, std::int64_t{1} << 40);

  // Two ranks: the mean of the pair.
  ranks.pop_back();
  EXPECT_EQ(median_profile(ranks)->blocks[0].forward_s, 2);

  // Scratch holds kernels' process-wide buffers, which each rank grew on its own: the
  // largest counts. Workspace, like every other byte count, must agree.
  ranks[1].blocks[0].scratch_bytes = 99;
  EXPECT_EQ(median_profile(ranks)->blocks[0].scratch_bytes, 99);
  // Its growth likewise, and unknown when a rank did not measure it.
  ranks[0].blocks[0].scratch_growth_bytes = 5;
  ranks[1].blocks[0].scratch_growth_bytes = 9;
  EXPECT_EQ(median_profile(ranks)->blocks[0].scratch_growth_bytes, 9);
  ranks[0].blocks[0].scratch_growth_bytes = std::nullopt;
  EXPECT_FALSE(median_profile(ranks)->blocks[0].scratch_growth_bytes.has_value());
  // One-sample times take their medians too, and are unknown when a rank lacks them.
  ranks[0].blocks[1].one_sample->forward_s = 1;
  ranks[1].blocks[1].one_sample->forward_s = 3;
  EXPECT_EQ(median_profile(ranks)->blocks[1].one_sample->forward_s, 2);
  ranks[1].blocks[1].one_sample.reset();
  EXPECT_FALSE(median_profile(ranks)->blocks[1].one_sample.has_value());
  ranks[1].blocks[1].workspace_bytes = 8;
  EXPECT_FALSE(median_profile(ranks).ok());
  ranks[1].blocks[1].workspace_bytes = ranks[0].blocks[1].workspace_bytes;
  ranks[1].blocks[1].stash_bytes = 7;
  EXPECT_EQ(median_profile(ranks).status().message(),
            "median profile: profile 1 differs from profile 0 in block 1 (head) beyond its times");
  EXPECT_EQ(median_profile({}).status().message(), "median profile: no profiles to combine");
}

TEST(Profile, MissingFileIsAnIoError) {
  const auto p = read_profile("/nonexistent/profile.json");
  EXPECT_EQ(p.status().code(), StatusCode::io_error);
  EXPECT_EQ(p.status().message(), "cannot open profile /nonexistent/profile.json");
}

}  // namespace
}  // namespace spw::sched
