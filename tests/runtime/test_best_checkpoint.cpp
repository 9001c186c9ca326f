// output.keep_best's record: a resumed run goes on from the record of the run it continues,
// never from a later one, and a fresh run starts its own.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/best_checkpoint.hpp"

namespace spw {
namespace {

class BestRecord : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::path(testing::TempDir()) / "spw-best-XXXXXX").string();
    dir_ = mkdtemp(pattern.data());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(BestRecord, AResumedRunGoesOnFromARecordNoLaterThanItsStep) {
  ASSERT_TRUE(write_best_record(dir_, {40, 2.5}).ok());
  EXPECT_EQ(best_checkpoint_path(dir_), dir_ + "/best.h5");
  auto resumed = read_best_record(dir_, 50);
  ASSERT_TRUE(resumed.ok()) << resumed.status().message();
  EXPECT_EQ(resumed->step, 40);
  EXPECT_EQ(resumed->loss, 2.5);
  EXPECT_FALSE(resumed->improved_by(2.5));
  EXPECT_TRUE(resumed->improved_by(2.4));
  EXPECT_EQ(read_best_record(dir_, 40)->step, 40);
  // From a step before the record: the record belongs to a run this one does not continue.
  EXPECT_EQ(read_best_record(dir_, 30)->step, -1);
  // A fresh run starts its own.
  const BestCheckpoint fresh = *read_best_record(dir_, -1);
  EXPECT_EQ(fresh.step, -1);
  EXPECT_TRUE(fresh.improved_by(1e300));
}

TEST_F(BestRecord, NoRecordIsNoBestAndAnUnreadableOneIsNamed) {
  EXPECT_EQ(read_best_record(dir_, 10)->step, -1);
  std::ofstream(dir_ + "/best.json") << "{\"step\": 3";
  auto broken = read_best_record(dir_, 10);
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.status().code(), StatusCode::io_error);
  const std::string& message = broken.status().message();
  EXPECT_EQ(message.rfind("cannot read " + dir_ + "/best.json (", 0), 0u) << message;
  EXPECT_NE(message.find("): remove it, or resume into another output.dir"), std::string::npos)
      << message;
}

}  // namespace
}  // namespace spw
