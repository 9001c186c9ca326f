// Token files (data.source = "tokens"): the ids a tokenizer wrote, mapped and drawn with the
// text corpus's window formula. The reference is the text corpus itself: a text's bytes
// written as 2- or 4-byte ids must give its batches, its split and a trainer's losses to the
// bit.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/job_config.hpp"
#include "runtime/text_corpus.hpp"
#include "runtime/token_file.hpp"
#include "runtime/train_command.hpp"
#include "runtime/trainer.hpp"
#include "temp_dir.hpp"

namespace spw {
namespace {

namespace fs = std::filesystem;

// Little-endian ids of `width` bytes, as a tokenizer's numpy array tofile() writes them.
void write_ids(const std::string& path, const std::vector<std::uint32_t>& ids, int width) {
  std::ofstream out(path, std::ios::binary);
  for (std::uint32_t id : ids) {
    for (int b = 0; b < width; ++b) out.put(static_cast<char>((id >> (8 * b)) & 0xff));
  }
}

std::vector<std::uint8_t> text_bytes(std::size_t count) {
  const std::string text =
      "Spillway trains deep networks that outgrow a node, on CPU clusters, in pipelines. ";
  std::vector<std::uint8_t> bytes;
  for (std::size_t i = 0; i < count; ++i) {
    bytes.push_back(static_cast<std::uint8_t>(text[(i * 7 + i / 13) % text.size()]));
  }
  return bytes;
}

std::vector<std::uint32_t> as_ids(const std::vector<std::uint8_t>& bytes) {
  return std::vector<std::uint32_t>(bytes.begin(), bytes.end());
}

struct Batch {
  std::vector<std::int32_t> tokens, targets;
  bool operator==(const Batch&) const = default;
};

template <typename Source>
Batch batch_of(const Source& source, std::int64_t step, std::int64_t batch, std::int64_t seq) {
  Batch out{std::vector<std::int32_t>(static_cast<std::size_t>(batch * seq), -1),
            std::vector<std::int32_t>(static_cast<std::size_t>(batch * seq), -1)};
  source.fill_batch(step, 0, batch, batch, seq, out.tokens.data(), out.targets.data());
  return out;
}

TEST(TokenFile, TextBytesAsIdsGiveTheTextCorpusBatches) {
  TempDir dir("spw-tokens");
  const std::vector<std::uint8_t> bytes = text_bytes(5000);
  const TextCorpus corpus = TextCorpus::from_bytes(bytes, "text");
  for (int width : {2, 4}) {
    const std::string path = dir.file("ids" + std::to_string(width) + ".bin");
    write_ids(path, as_ids(bytes), width);
    auto file = TokenFile::open(path, width, 256, 32);
    ASSERT_TRUE(file.ok()) << file.status().message();
    EXPECT_EQ(file->size(), 5000);
    for (std::int64_t step : {0, 1, 7, 123456789}) {
      EXPECT_EQ(batch_of(*file, step, 6, 32), batch_of(corpus, step, 6, 32))
          << "width " << width << ", step " << step;
    }
    // And split alike: each part gives that part's batches.
    auto held = file->held_out_part(0.1, 32);
    auto text_held = corpus.held_out_part(0.1, 32);
    auto kept = file->training_part(0.1, 32);
    auto text_kept = corpus.training_part(0.1, 32);
    ASSERT_TRUE(held.ok() && text_held.ok() && kept.ok() && text_kept.ok());
    EXPECT_EQ(held->size(), 500);
    EXPECT_EQ(kept->size(), 4500);
    EXPECT_EQ(held->token(0), bytes[4500]);
    EXPECT_EQ(batch_of(*held, 3, 4, 32), batch_of(*text_held, 3, 4, 32));
    EXPECT_EQ(batch_of(*kept, 3, 4, 32), batch_of(*text_kept, 3, 4, 32));
  }
}

TEST(TokenFile, IdsBeyondAByteAndWiderThanTwoBytesReadBack) {
  TempDir dir("spw-tokens");
  std::vector<std::uint32_t> ids;
  for (std::uint32_t i = 0; i < 100; ++i) ids.push_back(i * 65537u % 100003u);
  write_ids(dir.file("wide.bin"), ids, 4);
  auto file = TokenFile::open(dir.file("wide.bin"), 4, 100003, 8);
  ASSERT_TRUE(file.ok()) << file.status().message();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ASSERT_EQ(file->token(static_cast<std::int64_t>(i)), static_cast<std::int32_t>(ids[i]));
  }
  std::vector<std::uint32_t> narrow;
  for (std::uint32_t i = 0; i < 100; ++i) narrow.push_back(65535 - i * 300);
  write_ids(dir.file("narrow.bin"), narrow, 2);
  auto file16 = TokenFile::open(dir.file("narrow.bin"), 2, 65536, 8);
  ASSERT_TRUE(file16.ok()) << file16.status().message();
  EXPECT_EQ(file16->token(0), 65535);
  EXPECT_EQ(file16->token(99), 65535 - 99 * 300);
  // Targets are the inputs one token on.
  const Batch b = batch_of(*file16, 2, 3, 8);
  for (std::size_t row = 0; row < 3; ++row) {
    for (std::size_t t = 0; t + 1 < 8; ++t) {
      EXPECT_EQ(b.targets[row * 8 + t], b.tokens[row * 8 + t + 1]);
    }
  }
}

// llm.c's header as its dev/data scripts write it: 256 int32s, magic, version, count.
void write_llmc(const std::string& path, const std::vector<std::uint32_t>& ids, std::int32_t magic,
                std::int32_t version, int width, std::int64_t count) {
  std::vector<std::int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = static_cast<std::int32_t>(count);
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), 256 * 4);
  }
  const std::string body = path + ".ids";
  write_ids(body, ids, width);
  std::ofstream(path, std::ios::binary | std::ios::app)
      << std::ifstream(body, std::ios::binary).rdbuf();
}

// A file behind llm.c's header reads as the same ids without it: batches, parts and digest,
// for both of its id widths.
TEST(TokenFile, AnLlmcHeaderIsReadAndTheIdsAfterItAreTheFile) {
  TempDir dir("spw-tokens");
  const std::vector<std::uint32_t> ids = as_ids(text_bytes(3000));
  for (const auto& [magic, version, width] :
       {std::tuple{20240520, 1, 2}, std::tuple{20240801, 7, 4}}) {
    const std::string raw = dir.file("raw" + std::to_string(width) + ".bin");
    const std::string headed = dir.file("llmc" + std::to_string(width) + ".bin");
    write_ids(raw, ids, width);
    write_llmc(headed, ids, magic, version, width, 3000);
    auto plain = TokenFile::open(raw, width, 256, 32);
    auto file = TokenFile::open(headed, width, 256, 32);
    ASSERT_TRUE(plain.ok() && file.ok()) << file.status().message();
    EXPECT_FALSE(plain->has_llmc_header());
    EXPECT_TRUE(file->has_llmc_header());
    EXPECT_EQ(file->size(), 3000);
    EXPECT_EQ(file->digest(), plain->digest());
    for (std::int64_t step : {0, 5, 99999}) {
      EXPECT_EQ(batch_of(*file, step, 6, 32), batch_of(*plain, step, 6, 32)) << width;
    }
    auto held = file->held_out_part(0.1, 32);
    ASSERT_TRUE(held.ok());
    EXPECT_EQ(held->token(0), static_cast<std::int32_t>(ids[2700]));
  }
}

TEST(TokenFile, AnLlmcHeaderThatDisagreesIsRefusedWithWhatToChange) {
  TempDir dir("spw-tokens");
  const std::vector<std::uint32_t> ids(500, 7);
  write_llmc(dir.file("gpt2.bin"), ids, 20240520, 1, 2, 500);
  EXPECT_EQ(TokenFile::open(dir.file("gpt2.bin"), 4, 256, 8).status().message(),
            "token file " + dir.file("gpt2.bin") +
                " has llm.c's header for gpt-2 ids of 2 bytes, but data.token_bytes = 4: set "
                "data.token_bytes = 2");
  write_llmc(dir.file("cut.bin"), ids, 20240801, 7, 4, 600);
  EXPECT_EQ(TokenFile::open(dir.file("cut.bin"), 4, 256, 8).status().message(),
            "token file " + dir.file("cut.bin") +
                " has llm.c's header for llama-3 ids of 4 bytes and a count of 600 ids, but 2000 "
                "bytes follow the header: the file is truncated or was not written whole; write "
                "it again");
  // Another version under the same magic is not llm.c's format: ids from the first byte,
  // whose first two (the magic's halves) name ids past the vocabulary.
  write_llmc(dir.file("v2.bin"), ids, 20240520, 2, 2, 500);
  EXPECT_EQ(TokenFile::open(dir.file("v2.bin"), 2, 256, 8).status().message(),
            "token file " + dir.file("v2.bin") +
                ": token 55432 at index 0 is not below model.vocab = 256: raise model.vocab, or "
                "check data.token_bytes (2 now)");
}

TEST(TokenFile, APartOutlivesTheFileItCameFrom) {
  TempDir dir("spw-tokens");
  write_ids(dir.file("t.bin"), as_ids(text_bytes(400)), 2);
  Result<TokenFile> part = error(StatusCode::internal, "unset");
  {
    auto file = TokenFile::open(dir.file("t.bin"), 2, 256, 16);
    ASSERT_TRUE(file.ok());
    part = file->held_out_part(0.25, 16);
  }
  ASSERT_TRUE(part.ok()) << part.status().message();
  EXPECT_EQ(part->size(), 100);
  EXPECT_EQ(part->token(99), text_bytes(400)[399]);
}

TEST(TokenFile, BadFilesAreRefusedWithWhatToChange) {
  TempDir dir("spw-tokens");
  const std::string missing = dir.file("missing.bin");
  auto absent = TokenFile::open(missing, 2, 256, 8);
  EXPECT_EQ(absent.status().code(), StatusCode::not_found);
  EXPECT_EQ(absent.status().message(),
            "token file " + missing + ": cannot open: No such file or directory (check data.path)");

  EXPECT_EQ(TokenFile::open(dir.file(""), 2, 256, 8).status().message(),
            "token file " + dir.file("") + " is not a regular file (check data.path)");

  std::ofstream(dir.file("odd.bin"), std::ios::binary) << std::string(21, 'a');
  EXPECT_EQ(TokenFile::open(dir.file("odd.bin"), 2, 256, 8).status().message(),
            "token file " + dir.file("odd.bin") +
                " has 21 bytes, not a whole number of 2-byte tokens: check data.token_bytes (2: "
                "uint16 ids, 4: uint32)");
  EXPECT_EQ(TokenFile::open(dir.file("odd.bin"), 3, 256, 8).status().message(),
            "data.token_bytes must be 2 (uint16 ids) or 4 (uint32 ids), got 3");

  write_ids(dir.file("short.bin"), std::vector<std::uint32_t>(9, 1), 2);
  EXPECT_EQ(TokenFile::open(dir.file("short.bin"), 2, 256, 8).status().message(),
            "token file " + dir.file("short.bin") +
                " has 9 tokens, fewer than model.seq + 2 = 10: use a larger file or a shorter "
                "model.seq");
  EXPECT_TRUE(TokenFile::open(dir.file("short.bin"), 2, 256, 7).ok());

  // The first id out of range is named, with its index: the file or the vocabulary is wrong.
  std::vector<std::uint32_t> ids(1000, 5);
  ids[700] = 50257;
  ids[900] = 60000;
  write_ids(dir.file("big.bin"), ids, 2);
  auto big = TokenFile::open(dir.file("big.bin"), 2, 50257, 8);
  EXPECT_EQ(big.status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(big.status().message(),
            "token file " + dir.file("big.bin") +
                ": token 50257 at index 700 is not below model.vocab = 50257: raise model.vocab, "
                "or check data.token_bytes (2 now)");
  EXPECT_TRUE(TokenFile::open(dir.file("big.bin"), 2, 60001, 8).ok());
  // The same bytes read as 4-byte ids pair two 2-byte ids into one large id.
  EXPECT_EQ(TokenFile::open(dir.file("big.bin"), 4, 60001, 8).status().message(),
            "token file " + dir.file("big.bin") +
                ": token 327685 at index 0 is not below model.vocab = 60001: raise model.vocab, "
                "or check data.token_bytes (4 now)");

  auto file = TokenFile::open(dir.file("big.bin"), 2, 60001, 8);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->held_out_part(0.005, 8).status().message(),
            "data.holdout = 0.005 leaves 5 of the 1000 tokens of token file " +
                dir.file("big.bin") +
                " for evaluation, fewer than model.seq + 2 = 10: raise "
                "data.holdout");
  EXPECT_EQ(file->training_part(0.995, 8).status().message(),
            "data.holdout = 0.995 leaves 5 of the 1000 tokens of token file " +
                dir.file("big.bin") +
                " for training, fewer than model.seq + 2 = 10: lower "
                "data.holdout");
}

TrainSettings tiny_gpt(const std::string& data, int vocab) {
  auto job = parse_job_string(
      "[model]\nkind = \"gpt\"\nlayers = 2\nd_model = 32\nheads = 4\nseq = 16\nvocab = " +
          std::to_string(vocab) + "\n[data]\n" + data +
          "\nholdout = 0.1\n[train]\nbatch = 8\nsteps = 6\nlr = 3e-3\n[eval]\nevery = 3\n",
      "tiny.toml", {});
  EXPECT_TRUE(job.ok()) << job.status().message();
  auto settings = train_settings_from(*job);
  EXPECT_TRUE(settings.ok()) << settings.status().message();
  return *settings;
}

struct TrainedRun {
  std::vector<double> loss;
  double eval_loss = 0;
};

TrainedRun train(const TrainSettings& settings, int steps) {
  auto trainer = Trainer::create(settings);
  EXPECT_TRUE(trainer.ok()) << trainer.status().message();
  if (!trainer.ok()) return {};
  TrainedRun run;
  for (int i = 0; i < steps; ++i) {
    StepResult step;
    EXPECT_TRUE((*trainer)->run_step(step).ok());
    run.loss.push_back(step.loss);
  }
  auto eval = (*trainer)->evaluate(2);
  EXPECT_TRUE(eval.ok()) << eval.status().message();
  run.eval_loss = eval.ok() ? *eval : 0;
  return run;
}

TEST(TokenData, ATrainerOnTextAsIdsComputesTheTextRunsLosses) {
  TempDir dir("spw-tokens");
  const std::vector<std::uint8_t> bytes = text_bytes(20000);
  std::ofstream(dir.file("corpus.txt"), std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  write_ids(dir.file("corpus.bin"), as_ids(bytes), 2);
  const TrainedRun text =
      train(tiny_gpt("source = \"text\"\npath = \"" + dir.file("corpus.txt") + "\"", 256), 6);
  const TrainedRun ids =
      train(tiny_gpt("source = \"tokens\"\npath = \"" + dir.file("corpus.bin") + "\"", 256), 6);
  ASSERT_EQ(text.loss.size(), 6u);
  EXPECT_EQ(ids.loss, text.loss);
  EXPECT_EQ(ids.eval_loss, text.eval_loss);
}

TEST(TokenData, AVocabularyBeyondBytesIsLearned) {
  // A cycle of 40 ids spread over [0, 1000), most of them beyond a byte: each id's successor is
  // fixed, so a model that uses the whole embedding and head learns to predict it.
  TempDir dir("spw-tokens");
  std::vector<std::uint32_t> cycle, ids;
  for (std::uint32_t i = 0; i < 40; ++i) cycle.push_back((i * 619 + 13) % 1000);
  for (std::size_t i = 0; i < 8000; ++i) ids.push_back(cycle[i % cycle.size()]);
  write_ids(dir.file("cycle.bin"), ids, 2);
  TrainSettings settings =
      tiny_gpt("source = \"tokens\"\npath = \"" + dir.file("cycle.bin") + "\"", 1000);
  settings.optimizer.lr = 1e-2;
  const TrainedRun run = train(settings, 60);
  // ln 1000 = 6.91 untrained; measured 6.95 at step 1, 0.008 at step 60 and held out.
  EXPECT_GT(run.loss.front(), 6.5);
  EXPECT_LT(run.loss.back(), 1.0);
  EXPECT_LT(run.eval_loss, 1.0);
}

TEST(TokenData, AModelTooSmallForTheIdsOrAnMlpIsRefused) {
  TempDir dir("spw-tokens");
  write_ids(dir.file("t.bin"), std::vector<std::uint32_t>(100, 300), 2);
  auto trainer =
      Trainer::create(tiny_gpt("source = \"tokens\"\npath = \"" + dir.file("t.bin") + "\"", 256));
  ASSERT_FALSE(trainer.ok());
  EXPECT_EQ(trainer.status().message(),
            "token file " + dir.file("t.bin") +
                ": token 300 at index 0 is not below model.vocab = 256: raise model.vocab, or "
                "check data.token_bytes (2 now)");
  auto mlp = parse_job_string(
      "[model]\nkind = \"mlp\"\ndims = [16, 4]\n[data]\nsource = "
      "\"tokens\"\npath = \"" +
          dir.file("t.bin") + "\"\n[train]\nsteps = 1\n",
      "mlp.toml", {});
  ASSERT_TRUE(mlp.ok()) << mlp.status().message();
  auto mlp_settings = train_settings_from(*mlp);
  ASSERT_TRUE(mlp_settings.ok());
  EXPECT_EQ(Trainer::create(*mlp_settings).status().message(),
            "data.source \"tokens\" feeds a gpt, but model.kind is \"mlp\": use "
            "\"fashion-mnist\" or \"synthetic\"");
}

}  // namespace
}  // namespace spw
