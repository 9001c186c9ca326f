// CRC-32C against published check values, and the hardware and table versions against each
// other on data of every length class.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "offload/crc32c.hpp"

namespace spw::offload {
namespace {

std::uint32_t of(const std::string& text, bool portable) {
  return portable ? crc32c_portable(text.data(), text.size()) : crc32c(text.data(), text.size());
}

TEST(Crc32c, KnownVectors) {
  for (const bool portable : {false, true}) {
    SCOPED_TRACE(portable ? "table" : "crc32c");
    EXPECT_EQ(of("123456789", portable), 0xE3069283u);
    EXPECT_EQ(of("", portable), 0x00000000u);
    EXPECT_EQ(of("a", portable), 0xC1D04330u);
    // RFC 3720 (iSCSI) B.4: 32 bytes of zeros, of 0xFF, and ascending 0..31.
    EXPECT_EQ(of(std::string(32, '\0'), portable), 0x8A9136AAu);
    EXPECT_EQ(of(std::string(32, '\xFF'), portable), 0x62A8AB43u);
    std::string ascending;
    for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
    EXPECT_EQ(of(ascending, portable), 0x46DD794Eu);
  }
}

TEST(Crc32c, HardwareAndTableAgreeAtEveryLengthAndAlignment) {
  std::mt19937 random(7);
  std::vector<unsigned char> data(5000);
  for (auto& byte : data) byte = static_cast<unsigned char>(random());
  for (std::size_t start = 0; start < 9; ++start)
    for (std::size_t length : {0u, 1u, 7u, 8u, 9u, 63u, 64u, 65u, 4096u, 4991u})
      EXPECT_EQ(crc32c(data.data() + start, length), crc32c_portable(data.data() + start, length))
          << "start " << start << " length " << length;
}

TEST(Crc32c, SeedContinuesAnEarlierResult) {
  const std::string text = "The quick brown fox jumps over the lazy dog";
  for (std::size_t split = 0; split <= text.size(); split += 5) {
    const std::uint32_t first = crc32c(text.data(), split);
    EXPECT_EQ(crc32c(text.data() + split, text.size() - split, first), of(text, false));
    EXPECT_EQ(crc32c_portable(text.data() + split, text.size() - split, first), of(text, true));
  }
  EXPECT_EQ(of(text, false), 0x22620404u);
}

TEST(Crc32c, ASingleFlippedBitChangesIt) {
  std::vector<unsigned char> data(1 << 16, 0x5A);
  const std::uint32_t clean = crc32c(data.data(), data.size());
  data[40000] ^= 0x10;
  EXPECT_NE(crc32c(data.data(), data.size()), clean);
}

}  // namespace
}  // namespace spw::offload
