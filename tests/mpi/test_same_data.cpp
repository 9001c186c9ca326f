// Every rank opens data.path itself, so two nodes can hold different copies of a corpus. The
// executor compares the ranks' data before training: the same bytes in different files pass,
// one changed id or a shorter copy on one rank is one error, the same on every rank, that
// names that rank.
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "pipeline_test_support.hpp"
#include "temp_dir.hpp"

namespace spw {
namespace {

// 2,000 byte-sized ids as uint16, with `changed` (if in range) set to 7 and `cut` ids fewer.
std::string write_ids(const TempDir& dir, int changed, int cut) {
  std::vector<std::uint16_t> ids;
  for (int i = 0; i < 2000 - cut; ++i) ids.push_back(static_cast<std::uint16_t>(i * 37 % 256));
  if (changed >= 0 && changed < static_cast<int>(ids.size())) ids[changed] = 7 + ids[changed] % 2;
  const std::string path = dir.file("ids.bin");
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(ids.data()),
             static_cast<std::streamsize>(ids.size() * sizeof(std::uint16_t)));
  return path;
}

Result<std::unique_ptr<PipelineExecutor>> executor_on(const std::string& path, bool evaluates) {
  TrainSettings settings = tiny_gpt(2);
  settings.data.source = DataKind::tokens;
  settings.data.path = path;
  settings.data.holdout = evaluates ? 0.1 : 0.0;
  settings.evaluates = evaluates;
  return executor_over_world(settings);
}

TEST(SameData, CopiesOfTheSameBytesTrain) {
  TempDir dir("spw-same-data");
  auto executor = executor_on(write_ids(dir, -1, 0), true);
  ASSERT_TRUE(executor.ok()) << executor.status().message();
  StepResult step;
  EXPECT_TRUE((*executor)->run_step(step).ok());
}

TEST(SameData, ACopyThatDiffersOnOneRankIsRefusedOnEveryRank) {
  const int last = world_size() - 1;
  for (bool evaluates : {false, true}) {
    // One id changed: at 100, training data; at 1950, in the held-out part when there is
    // one (the last 200 ids), which must be compared too.
    for (int changed : {100, 1950}) {
      TempDir dir("spw-same-data");
      auto executor =
          executor_on(write_ids(dir, world_rank() == last ? changed : -1, 0), evaluates);
      ASSERT_FALSE(executor.ok()) << "changed " << changed << ", evaluates " << evaluates;
      const std::string& message = executor.status().message();
      EXPECT_EQ(executor.status().code(), StatusCode::invalid_argument);
      EXPECT_EQ(message.rfind("rank " + std::to_string(last) +
                                  " reads other data than rank 0 "
                                  "(digest ",
                              0),
                0u)
          << message;
      EXPECT_NE(message.find("): every rank must read the same data.path; copy it whole to each "
                             "node, or use a file system they share"),
                std::string::npos)
          << message;
      EXPECT_EQ(message.find("held out") != std::string::npos, evaluates) << message;
    }
  }
  // A copy cut short: fewer samples a pass.
  TempDir dir("spw-same-data");
  auto executor = executor_on(write_ids(dir, -1, world_rank() == last ? 64 : 0), false);
  ASSERT_FALSE(executor.ok());
  EXPECT_NE(executor.status().message().find("242 samples a pass, against "), std::string::npos)
      << executor.status().message();
}

}  // namespace
}  // namespace spw
