// The file tier's measured rate: positive figures from a real round trip through FileTier,
// the directory and O_DIRECT reported as the tier has them, and arguments or directories
// that cannot work refused with their names. Nothing here asserts a speed.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "offload/file_rate.hpp"
#include "offload/file_tier.hpp"
#include "temp_dir.hpp"

namespace spw::offload {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the system's temporary one, removed after the test.
bool positive_and_finite(double x) { return x > 0 && std::isfinite(x); }

// bytes_per_s comes from the same repeat as the other two, so it is their harmonic mean.
void expect_consistent(const FileRate& rate) {
  EXPECT_TRUE(positive_and_finite(rate.bytes_per_s)) << rate.bytes_per_s;
  EXPECT_TRUE(positive_and_finite(rate.store_bytes_per_s)) << rate.store_bytes_per_s;
  EXPECT_TRUE(positive_and_finite(rate.load_bytes_per_s)) << rate.load_bytes_per_s;
  const double harmonic = 2 / (1 / rate.store_bytes_per_s + 1 / rate.load_bytes_per_s);
  EXPECT_NEAR(rate.bytes_per_s, harmonic, 1e-9 * rate.bytes_per_s);
}

TEST(FileRate, RoundTripsInATemporaryDirectory) {
  TempDir dir("spw-file-rate");
  ASSERT_FALSE(dir.dir().empty());
  auto rate = measure_file_rate(dir.dir(), std::size_t{4} << 20, 3);
  ASSERT_TRUE(rate.ok()) << rate.status().message();
  expect_consistent(*rate);
  EXPECT_EQ(rate->directory, dir.dir());
  auto tier = FileTier::create(dir.dir());
  ASSERT_TRUE(tier.ok()) << tier.status().message();
  EXPECT_EQ(rate->direct_io, (*tier)->direct_io());
  EXPECT_TRUE(fs::is_empty(dir.dir()));  // the tier's files have no name and are gone
}

TEST(FileRate, AnEvenCountAndAnUnalignedSizeInTheDefaultDirectory) {
  auto rate = measure_file_rate("", (std::size_t{1} << 20) + 3, 2);
  ASSERT_TRUE(rate.ok()) << rate.status().message();
  expect_consistent(*rate);
  auto expected = default_offload_dir();
  ASSERT_TRUE(expected.ok()) << expected.status().message();
  EXPECT_EQ(rate->directory, *expected);
}

TEST(FileRate, AMissingDirectoryIsNamed) {
  auto rate = measure_file_rate("/nonexistent/spillway-file-rate", 4096, 1);
  ASSERT_FALSE(rate.ok());
  EXPECT_EQ(rate.status().code(), StatusCode::not_found);
  EXPECT_EQ(rate.status().message().rfind(
                "measuring the file tier's rate in /nonexistent/spillway-file-rate: ", 0),
            0u)
      << rate.status().message();
}

TEST(FileRate, ZeroBytesOrRepeatsAreRefusedByName) {
  auto no_bytes = measure_file_rate("", 0, 3);
  ASSERT_FALSE(no_bytes.ok());
  EXPECT_EQ(no_bytes.status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(no_bytes.status().message(),
            "measuring the file tier's rate: bytes must be positive, got 0");
  auto no_repeats = measure_file_rate("", 4096, 0);
  ASSERT_FALSE(no_repeats.ok());
  EXPECT_EQ(no_repeats.status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(no_repeats.status().message(),
            "measuring the file tier's rate: repeats must be at least 1, got 0");
}

}  // namespace
}  // namespace spw::offload
