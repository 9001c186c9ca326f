// Sampling from a trained GPT: the draw follows the softmax (with temperature and top-k) as
// its arithmetic says, and a model trained on a repeating text continues the pattern.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/job_config.hpp"
#include "runtime/sample_command.hpp"
#include "runtime/sampler.hpp"
#include "runtime/train_command.hpp"

namespace spw {
namespace {

TEST(DrawToken, GreedyTakesTheLargestScoreAndTheLowerIdOnTies) {
  const std::vector<float> logits{1.0f, 4.0f, -2.0f, 4.0f};
  EXPECT_EQ(draw_token(logits.data(), 4, 0.0, 0, 0.99), 1);
  // top-k = 1 leaves nothing to draw among, whatever u.
  for (double u : {0.0, 0.5, 0.999}) EXPECT_EQ(draw_token(logits.data(), 4, 1.0, 1, u), 1);
}

TEST(DrawToken, FollowsTheSoftmaxOfTheScaledScores) {
  // Scores 0 and ln 3: probabilities 1/4 and 3/4, the likelier first in the cumulative sum.
  const std::vector<float> logits{0.0f, static_cast<float>(std::log(3.0))};
  EXPECT_EQ(draw_token(logits.data(), 2, 1.0, 0, 0.74), 1);
  EXPECT_EQ(draw_token(logits.data(), 2, 1.0, 0, 0.76), 0);
  // Temperature 2: weights 1 and sqrt 3, so the likelier byte has 0.634.
  EXPECT_EQ(draw_token(logits.data(), 2, 2.0, 0, 0.63), 1);
  EXPECT_EQ(draw_token(logits.data(), 2, 2.0, 0, 0.64), 0);
}

TEST(DrawToken, TopKDrawsOnlyAmongTheKLargest) {
  const std::vector<float> logits{5.0f, 1.0f, 3.0f, 4.9f};
  for (double u = 0; u < 1; u += 0.01) {
    const int token = draw_token(logits.data(), 4, 10.0, 2, u);
    EXPECT_TRUE(token == 0 || token == 3) << "u " << u << " drew " << token;
  }
}

class SampleFromATrainedModel : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern =
        (std::filesystem::path(testing::TempDir()) / "spw-sample-XXXXXX").string();
    dir_ = mkdtemp(pattern.data());
    std::ofstream corpus(dir_ / "pattern.txt", std::ios::binary);
    for (int i = 0; i < 2000; ++i) corpus << "abcdefgh";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  TrainSettings settings(const std::string& kind = "gpt") const {
    const std::string model =
        kind == "gpt" ? "[model]\nkind = \"gpt\"\nlayers = 1\nd_model = 32\nheads = 2\nseq = 16\n"
                      : "[model]\nkind = \"mlp\"\ndims = [4, 8, 3]\n";
    auto job =
        parse_job_string(model + "[data]\nsource = \"" +
                             (kind == "gpt" ? "text\"\npath = \"" + (dir_ / "pattern.txt").string()
                                            : std::string("synthetic")) +
                             "\"\n[train]\nbatch = 8\nsteps = 100\nlr = 1e-2\n",
                         "sample.toml", {});
    EXPECT_TRUE(job.ok()) << job.status().message();
    return *train_settings_from(*job);
  }

  std::filesystem::path dir_;
};

TEST_F(SampleFromATrainedModel, ContinuesTheRepeatingTextItLearned) {
  auto trainer = Trainer::create(settings());
  ASSERT_TRUE(trainer.ok()) << trainer.status().message();
  for (int i = 0; i < 100; ++i) {
    StepResult step;
    ASSERT_TRUE((*trainer)->run_step(step).ok());
  }
  SampleSettings greedy;
  greedy.prompt = "abcd";
  greedy.bytes = 20;
  greedy.temperature = 0;
  auto text = sample_text(**trainer, greedy);
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_EQ(*text, "efghabcdefghabcdefgh");
  // A prompt longer than the window is seen through its last model.seq bytes.
  greedy.prompt = std::string(40, 'x') + "abcdefghabcdefgh";
  greedy.bytes = 3;
  EXPECT_EQ(*sample_text(**trainer, greedy), "abc");
  // Drawn at temperature 1 the pattern is as sure: what it learned is near certain.
  SampleSettings drawn = greedy;
  drawn.temperature = 1.0;
  drawn.seed = 7;
  EXPECT_EQ(*sample_text(**trainer, drawn), "abc");
}

// The same in token ids, beyond a byte: a model of a 1,000-id vocabulary trained on a token
// file that cycles through 40 ids continues the cycle.
TEST_F(SampleFromATrainedModel, ContinuesTheCycleOfIdsItLearned) {
  std::vector<std::int32_t> cycle;
  for (int i = 0; i < 40; ++i) cycle.push_back((i * 619 + 13) % 1000);
  {
    std::ofstream file(dir_ / "cycle.bin", std::ios::binary);
    for (int i = 0; i < 8000; ++i) {
      const auto id = static_cast<std::uint16_t>(cycle[static_cast<std::size_t>(i % 40)]);
      file.put(static_cast<char>(id & 0xff)).put(static_cast<char>(id >> 8));
    }
  }
  auto job = parse_job_string(
      "[model]\nkind = \"gpt\"\nlayers = 1\nd_model = 32\nheads = 2\nseq = 16\nvocab = 1000\n"
      "[data]\nsource = \"tokens\"\npath = \"" +
          (dir_ / "cycle.bin").string() + "\"\n[train]\nbatch = 8\nsteps = 100\nlr = 1e-2\n",
      "cycle.toml", {});
  ASSERT_TRUE(job.ok()) << job.status().message();
  auto trainer = Trainer::create(*train_settings_from(*job));
  ASSERT_TRUE(trainer.ok()) << trainer.status().message();
  for (int i = 0; i < 100; ++i) {
    StepResult step;
    ASSERT_TRUE((*trainer)->run_step(step).ok());
  }
  SampleSettings greedy;
  greedy.bytes = 12;
  greedy.temperature = 0;
  auto ids = sample_tokens(**trainer, {cycle[5], cycle[6], cycle[7]}, greedy);
  ASSERT_TRUE(ids.ok()) << ids.status().message();
  EXPECT_EQ(*ids, std::vector<std::int32_t>(cycle.begin() + 8, cycle.begin() + 20));
}

TEST(ParseTokenIds, SpacesAndCommasSeparateAndAnythingElseIsNamed) {
  auto ids = parse_token_ids(" 464 2068,7586 ,\t0 ");
  ASSERT_TRUE(ids.ok()) << ids.status().message();
  EXPECT_EQ(*ids, (std::vector<std::int32_t>{464, 2068, 7586, 0}));
  EXPECT_EQ(parse_token_ids("12 x3 4").status().message(),
            "--prompt-ids: 'x3' is not a token id (a non-negative integer)");
  EXPECT_EQ(parse_token_ids("12 -3").status().message(),
            "--prompt-ids: '-3' is not a token id (a non-negative integer)");
  EXPECT_EQ(parse_token_ids("99999999999").status().message(),
            "--prompt-ids: '99999999999' is not a token id (a non-negative integer)");
  EXPECT_EQ(parse_token_ids(" , ").status().message(),
            "--prompt-ids holds no token id: give ids separated by spaces or commas");
}

TEST_F(SampleFromATrainedModel, TheSameSeedGivesTheSameTextAndBadSettingsAreNamed) {
  auto trainer = Trainer::create(settings());  // untrained: every byte about as likely
  ASSERT_TRUE(trainer.ok()) << trainer.status().message();
  SampleSettings s;
  s.prompt = "a";
  s.bytes = 30;
  const std::string first = *sample_text(**trainer, s);
  EXPECT_EQ(first.size(), 30u);
  EXPECT_EQ(*sample_text(**trainer, s), first);
  s.seed = 2;
  EXPECT_NE(*sample_text(**trainer, s), first);

  SampleSettings bad = s;
  bad.prompt = "";
  EXPECT_EQ(sample_text(**trainer, bad).status().message(),
            "the prompt is empty: give at least one byte");
  bad = s;
  bad.bytes = 0;
  EXPECT_EQ(sample_text(**trainer, bad).status().message(), "bytes must be at least 1, got 0");
  bad = s;
  bad.temperature = -1;
  EXPECT_EQ(sample_text(**trainer, bad).status().message(),
            "temperature must be 0 (greedy) or more, got -1");
  bad = s;
  bad.top_k = 257;
  EXPECT_EQ(sample_text(**trainer, bad).status().message(), "top-k must lie in [0, 256], got 257");

  auto mlp = Trainer::create(settings("mlp"));
  ASSERT_TRUE(mlp.ok()) << mlp.status().message();
  EXPECT_EQ(sample_text(**mlp, s).status().code(), StatusCode::unsupported);

  // A vocabulary beyond bytes (a token file's) has no byte to write for most ids.
  TrainSettings wide = settings();
  wide.data.source = DataKind::synthetic;
  wide.model.gpt.vocab = 1000;
  auto wide_trainer = Trainer::create(wide);
  ASSERT_TRUE(wide_trainer.ok()) << wide_trainer.status().message();
  EXPECT_EQ(sample_text(**wide_trainer, s).status().message(),
            "this model has model.vocab 1000, not bytes (256): sample it in token ids (spillway "
            "sample --prompt-ids) and decode them with the tokenizer that made its data");
  // In ids it goes: the continuation's ids lie in the vocabulary; a prompt's must too.
  auto ids = sample_tokens(**wide_trainer, {999, 0, 512}, s);
  ASSERT_TRUE(ids.ok()) << ids.status().message();
  EXPECT_EQ(ids->size(), static_cast<std::size_t>(s.bytes));
  for (std::int32_t id : *ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 1000);
  }
  EXPECT_EQ(sample_tokens(**wide_trainer, {3, 1000}, s).status().message(),
            "prompt token 1000 at index 1 is not in [0, model.vocab = 1000)");
  EXPECT_EQ(sample_tokens(**wide_trainer, {}, s).status().message(),
            "the prompt is empty: give at least one token");
}

}  // namespace
}  // namespace spw
