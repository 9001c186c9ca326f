// The corpus byte stream and its sampling formula are part of a run's identity (a report quotes
// the digest and a rerun must see the same windows), so both are pinned exactly here.
#include "runtime/text_corpus.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "temp_dir.hpp"

namespace spw {
namespace {

namespace fs = std::filesystem;

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

std::vector<std::uint8_t> pattern_bytes(int n) {
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(n));
  for (int k = 0; k < n; ++k) {
    bytes[static_cast<std::size_t>(k)] = static_cast<std::uint8_t>((k * 31 + 7) % 256);
  }
  return bytes;
}

std::string as_string(const std::vector<std::uint8_t>& bytes) {
  return {bytes.begin(), bytes.end()};
}

TEST(TextCorpus, ConcatenatesInByteWisePathOrderSkippingDatFilesAndSymlinks) {
  TempDir dir("spw-text");
  const fs::path root = dir.path() / "corpus";
  write(root / "a.txt", "alpha\n");
  write(root / "B.txt", "Bravo\n");  // 'B' < 'a' byte-wise
  write(root / "index.dat", "DAT");
  write(root / "sub" / "c.txt", "charlie\n");
  write(root / "sub" / "deeper" / "d.txt", "delta\n");
  write(root / "sub" / "deeper" / ".h", "hidden\n");
  write(root / "sub" / "deeper" / "e.dat", "DAT");
  // '-' < '/', so the full-path order puts sub-x before everything under sub/, unlike a walk
  // that sorts each directory's entries.
  write(root / "sub-x", "sub-x\n");
  fs::create_symlink(root / "a.txt", root / "link.u8");
  fs::create_symlink(root / "sub", root / "linkdir");
  fs::create_symlink(root / "nowhere", root / "dangling");
  write(dir.path() / "outside" / "o.txt", "outside\n");
  fs::create_symlink(dir.path() / "outside", root / "sub" / "outside");

  Result<TextCorpus> corpus = TextCorpus::load(root.string());
  ASSERT_TRUE(corpus.ok()) << corpus.status().message();
  EXPECT_EQ(as_string(corpus->bytes()), "Bravo\nalpha\nsub-x\ncharlie\nhidden\ndelta\n");
  EXPECT_EQ(corpus->size(), 39);
  EXPECT_EQ(corpus->file_count(), 6);
  EXPECT_EQ(corpus->path(), root.string());
}

TEST(TextCorpus, LoadsOneFileAndFollowsALinkGivenAsThePath) {
  TempDir dir("spw-text");
  write(dir.path() / "one.txt", "just this");
  fs::create_symlink(dir.path() / "one.txt", dir.path() / "named.u8");
  for (const char* name : {"one.txt", "named.u8"}) {
    Result<TextCorpus> corpus = TextCorpus::load((dir.path() / name).string());
    ASSERT_TRUE(corpus.ok()) << corpus.status().message();
    EXPECT_EQ(as_string(corpus->bytes()), "just this");
    EXPECT_EQ(corpus->file_count(), 1);
  }
}

TEST(TextCorpus, MissingPathIsNotFoundAndSaysHowToFix) {
  TempDir dir("spw-text");
  const std::string missing = (dir.path() / "no-such-corpus").string();
  Result<TextCorpus> corpus = TextCorpus::load(missing);
  ASSERT_FALSE(corpus.ok());
  EXPECT_EQ(corpus.status().code(), StatusCode::not_found);
  const std::string& message = corpus.status().message();
  EXPECT_NE(message.find(missing), std::string::npos) << message;
  EXPECT_NE(message.find("install the Debian package fortunes or set data.path"), std::string::npos)
      << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(TextCorpus, DirectoryWithoutEligibleFilesIsNotFound) {
  TempDir dir("spw-text");
  write(dir.path() / "only.dat", "DAT");
  fs::create_symlink(dir.path() / "only.dat", dir.path() / "only.u8");
  Result<TextCorpus> corpus = TextCorpus::load(dir.path().string());
  ASSERT_FALSE(corpus.ok());
  EXPECT_EQ(corpus.status().code(), StatusCode::not_found);
  EXPECT_NE(corpus.status().message().find("no text files"), std::string::npos)
      << corpus.status().message();
}

TEST(TextCorpus, SpecialFileIsAnIoError) {
  TempDir dir("spw-text");
  const fs::path fifo = dir.path() / "pipe";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  Result<TextCorpus> corpus = TextCorpus::load(fifo.string());
  ASSERT_FALSE(corpus.ok());
  EXPECT_EQ(corpus.status().code(), StatusCode::io_error);
  EXPECT_NE(corpus.status().message().find(fifo.string()), std::string::npos);
}

TEST(TextCorpus, TooShortForTheSequenceNamesPathLengthAndSeq) {
  TempDir dir("spw-text");
  const std::string path = (dir.path() / "tiny.txt").string();
  write(path, "123456789");
  Result<TextCorpus> too_short = TextCorpus::load(path, 8);
  ASSERT_FALSE(too_short.ok());
  EXPECT_EQ(too_short.status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(too_short.status().message(),
            "text corpus " + path +
                " has 9 bytes, fewer than sequence length 8 + 2 needs; use a larger corpus or a "
                "shorter model.seq");
  // seq + 2 bytes leave exactly one window, at offset 0.
  Result<TextCorpus> just_enough = TextCorpus::load(path, 7);
  ASSERT_TRUE(just_enough.ok()) << just_enough.status().message();
  EXPECT_EQ(just_enough->sample_offset(12, 3, 5, 7), 0);
  EXPECT_FALSE(just_enough->check_sequence(0).ok());
}

TEST(TextCorpus, SampleOffsetsMatchHandComputedValues) {
  // len 1000, T = 8, B = 4: modulus 1000 - 8 - 1 = 991, 7919 * 8 = 63352 = 63 * 991 + 919.
  const TextCorpus corpus = TextCorpus::from_bytes(pattern_bytes(1000), "pattern");
  EXPECT_EQ(corpus.sample_offset(0, 0, 4, 8), 0);
  EXPECT_EQ(corpus.sample_offset(0, 1, 4, 8), 919);  // 63352 mod 991
  EXPECT_EQ(corpus.sample_offset(0, 3, 4, 8), 775);  // 3 * 63352 = 190056 = 191 * 991 + 775
  EXPECT_EQ(corpus.sample_offset(1, 0, 4, 8), 703);  // 4 * 63352 = 253408 = 255 * 991 + 703
  EXPECT_EQ(corpus.sample_offset(2, 3, 4, 8), 199);  // 11 * 63352 = 696872 = 703 * 991 + 199
  EXPECT_EQ(corpus.sample_offset(5, 2, 4, 8), 398);  // 22 * 63352 = 1393744 = 1406 * 991 + 398
}

TEST(TextCorpus, SampleOffsetIsExactWhereSixtyFourBitsWouldWrap) {
  // Reference values from arbitrary-precision arithmetic.
  const TextCorpus corpus = TextCorpus::from_bytes(pattern_bytes(1000), "pattern");
  EXPECT_EQ(corpus.sample_offset(std::int64_t{1} << 62, 2, 3, 8), 784);
  EXPECT_EQ(corpus.sample_offset(INT64_MAX, 12345, std::int64_t{1} << 40, 8), 817);
}

TEST(TextCorpus, FillBatchTakesWindowsAtTheOffsetsWithTargetsShiftedByOne) {
  const std::vector<std::uint8_t> bytes = pattern_bytes(1000);
  const TextCorpus corpus = TextCorpus::from_bytes(bytes, "pattern");
  constexpr std::int64_t kBatch = 4, kSeq = 8;
  std::vector<std::int32_t> tokens(kBatch * kSeq), targets(kBatch * kSeq);
  corpus.fill_batch(2, 0, kBatch, kBatch, kSeq, tokens.data(), targets.data());
  for (std::int64_t i = 0; i < kBatch; ++i) {
    const std::int64_t o = corpus.sample_offset(2, i, kBatch, kSeq);
    for (std::int64_t t = 0; t < kSeq; ++t) {
      const auto at = static_cast<std::size_t>(i * kSeq + t);
      EXPECT_EQ(tokens[at], bytes[static_cast<std::size_t>(o + t)]);
      EXPECT_EQ(targets[at], bytes[static_cast<std::size_t>(o + t + 1)]);
    }
  }
  // Sample 3 of step 2 starts at 199 (above): (199 * 31 + 7) mod 256 = 32, then +31 a byte.
  EXPECT_EQ(tokens[3 * kSeq], 32);
  EXPECT_EQ(tokens[3 * kSeq + 1], 63);
  EXPECT_EQ(targets[3 * kSeq], 63);
  EXPECT_EQ(targets[3 * kSeq + kSeq - 1], (207 * 31 + 7) % 256);
}

TEST(TextCorpus, SlicesOfABatchEqualTheWholeBatch) {
  const TextCorpus corpus = TextCorpus::from_bytes(pattern_bytes(5000), "pattern");
  constexpr std::int64_t kBatch = 12, kSeq = 16, kStep = 37;
  std::vector<std::int32_t> whole_tokens(kBatch * kSeq), whole_targets(kBatch * kSeq);
  corpus.fill_batch(kStep, 0, kBatch, kBatch, kSeq, whole_tokens.data(), whole_targets.data());
  std::vector<std::int32_t> tokens(kBatch * kSeq, -1), targets(kBatch * kSeq, -1);
  // Uneven slices, as microbatches of different replicas might take them.
  for (auto [first, count] : {std::pair<std::int64_t, std::int64_t>{0, 5}, {5, 1}, {6, 6}}) {
    corpus.fill_batch(kStep, first, count, kBatch, kSeq, tokens.data() + first * kSeq,
                      targets.data() + first * kSeq);
  }
  EXPECT_EQ(tokens, whole_tokens);
  EXPECT_EQ(targets, whole_targets);
}

TEST(TextCorpus, DigestIsFnv1a64) {
  const std::string foobar = "foobar";
  EXPECT_EQ(fnv1a64(nullptr, 0), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a64(reinterpret_cast<const std::uint8_t*>("a"), 1), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(fnv1a64(reinterpret_cast<const std::uint8_t*>(foobar.data()), foobar.size()),
            0x85944171f73967e8ULL);
  const TextCorpus corpus =
      TextCorpus::from_bytes(std::vector<std::uint8_t>(foobar.begin(), foobar.end()), "x");
  EXPECT_EQ(corpus.digest(), 0x85944171f73967e8ULL);
}

// The setup script installs the fortunes package, so its absence is a failure, not a skip.
TEST(TextCorpus, RealFortunesCorpusLoads) {
  Result<TextCorpus> corpus = TextCorpus::load(TextCorpus::kDefaultPath, 128);
  ASSERT_TRUE(corpus.ok()) << corpus.status().message();
  EXPECT_GT(corpus->size(), 1 << 20);
  EXPECT_GT(corpus->file_count(), 10);
  std::vector<std::int32_t> tokens(2 * 128), targets(2 * 128);
  corpus->fill_batch(1000000, 0, 2, 16, 128, tokens.data(), targets.data());
  for (std::int32_t token : tokens) {
    EXPECT_GE(token, 0);
    EXPECT_LT(token, 256);
  }
}

TEST(TextCorpus, HoldoutSplitsTheStreamAtItsEndWithoutOverlap) {
  const TextCorpus whole = TextCorpus::from_bytes(pattern_bytes(1000), "pattern");
  auto training = whole.training_part(0.1, 8);
  auto held_out = whole.held_out_part(0.1, 8);
  ASSERT_TRUE(training.ok()) << training.status().message();
  ASSERT_TRUE(held_out.ok()) << held_out.status().message();
  EXPECT_EQ(training->size(), 900);
  EXPECT_EQ(held_out->size(), 100);
  EXPECT_EQ(training->bytes(),
            std::vector<std::uint8_t>(whole.bytes().begin(), whole.bytes().begin() + 900));
  EXPECT_EQ(held_out->bytes(),
            std::vector<std::uint8_t>(whole.bytes().begin() + 900, whole.bytes().end()));
  EXPECT_EQ(held_out->path(), "pattern");
  EXPECT_EQ(held_out->digest(), fnv1a64(whole.bytes().data() + 900, 100));
  // Every window of the held-out part lies in the last 100 bytes of the whole stream.
  std::vector<std::int32_t> tokens(4 * 8), targets(4 * 8);
  held_out->fill_batch(3, 0, 4, 4, 8, tokens.data(), targets.data());
  for (int row = 0; row < 4; ++row) {
    const std::int64_t offset = held_out->sample_offset(3, row, 4, 8);
    EXPECT_LE(offset + 9, 100);
    EXPECT_EQ(tokens[static_cast<std::size_t>(row * 8)], whole.bytes()[900 + offset]);
  }
}

TEST(TextCorpus, AHoldoutThatLeavesTooLittleTextNamesTheFix) {
  const TextCorpus whole = TextCorpus::from_bytes(pattern_bytes(1000), "pattern");
  auto small = whole.held_out_part(0.005, 8);  // 5 bytes
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(small.status().message(),
            "data.holdout = 0.005 leaves 5 of the 1000 bytes of text corpus pattern for "
            "evaluation, fewer than model.seq + 2 = 10: raise data.holdout");
  auto large = whole.training_part(0.999, 8);
  ASSERT_FALSE(large.ok());
  EXPECT_EQ(large.status().message(),
            "data.holdout = 0.999 leaves 1 of the 1000 bytes of text corpus pattern for "
            "training, fewer than model.seq + 2 = 10: lower data.holdout");
  EXPECT_FALSE(whole.training_part(0, 8).ok());
}

}  // namespace
}  // namespace spw
