// CRC-32C (Castagnoli), the checksum the offload engine keeps for every evicted stash so that
// a copy corrupted in a tier is caught when it comes back instead of training on it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace spw::offload {

// The standard CRC-32C (reflected, initial and final value ~0): crc32c("123456789") is
// 0xE3069283. `seed` continues an earlier result, so crc32c(b, nb, crc32c(a, na)) is the CRC
// of a followed by b. Uses SSE4.2's crc32 instruction when compiled with it.
std::uint32_t crc32c(const void* data, std::size_t bytes, std::uint32_t seed = 0);

// The same with a lookup table and no special instructions; crc32c falls back to it.
std::uint32_t crc32c_portable(const void* data, std::size_t bytes, std::uint32_t seed = 0);

}  // namespace spw::offload
