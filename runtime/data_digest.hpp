// A 64-bit digest of a block of memory, to tell whether two ranks read the same data: each
// rank opens data.path itself, and a copy staged to node-local storage can differ (cut
// short, or another version) without any error. Not cryptographic: it only has to see
// accidental differences, and to run at memory speed over GiB of token ids.
#pragma once

#include <cstddef>
#include <cstdint>

namespace spw {

// Eight interleaved add-multiply-rotate lanes over 8-byte words (so the lanes vectorise), the tail
// byte by byte, the size mixed in: blocks that differ in any byte or in length digest apart
// but for a 2^-64 chance.
std::uint64_t data_digest(const void* data, std::size_t bytes);

}  // namespace spw
