#include "runtime/token_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <system_error>

#include "runtime/data_digest.hpp"
#include "runtime/sample_window.hpp"

namespace spw {

// The files are written little-endian; ids are read in place rather than decoded byte by byte.
static_assert(std::endian::native == std::endian::little, "token files are little-endian");

struct TokenFile::Mapping {
  const unsigned char* bytes = nullptr;
  std::size_t length = 0;
  std::int64_t header_bytes = 0;  // before the first id

  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (bytes != nullptr) munmap(const_cast<unsigned char*>(bytes), length);
  }
};

namespace {

std::string token_file_text(const std::string& path) { return "token file " + path; }

Status system_error(const std::string& path, const char* what, int code) {
  const StatusCode status = code == ENOENT ? StatusCode::not_found : StatusCode::io_error;
  return error(status, token_file_text(path) + ": " + what + ": " +
                           std::generic_category().message(code) + " (check data.path)");
}

// Closes the descriptor on every way out of open(); a mapping keeps the file open by itself.
class Descriptor {
 public:
  explicit Descriptor(int fd) : fd_(fd) {}
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// The first index whose id is not below vocab, or -1. A vectorised maximum first; the scalar
// search for the culprit runs only when there is one.
template <typename Id>
std::int64_t first_out_of_range(const Id* ids, std::int64_t count, std::int64_t vocab) {
  Id highest = 0;
#pragma omp simd reduction(max : highest)
  for (std::int64_t i = 0; i < count; ++i) highest = std::max(highest, ids[i]);
  if (static_cast<std::int64_t>(highest) < vocab) return -1;
  for (std::int64_t i = 0; i < count; ++i) {
    if (static_cast<std::int64_t>(ids[i]) >= vocab) return i;
  }
  return -1;
}

// llm.c's token files (its dev/data scripts) open with 256 int32s: a magic that names the id
// width, a version, and the count of ids after the header.
struct LlmcFormat {
  std::int32_t magic;
  std::int32_t version;
  int token_bytes;
  const char* ids;  // what its writer calls them
};
constexpr LlmcFormat kLlmcFormats[] = {{20240520, 1, 2, "gpt-2"}, {20240801, 7, 4, "llama-3"}};
constexpr std::int64_t kLlmcHeaderBytes = 256 * 4;

// The header's length when the file opens with llm.c's header (its magic and version), else
// 0: a file without one is ids from its first byte. A header whose count or id width
// disagrees with the file or the job is an error naming what to change.
Result<std::int64_t> llmc_header_bytes(const std::string& path, int fd, std::int64_t length,
                                       int token_bytes) {
  if (length < kLlmcHeaderBytes) return std::int64_t{0};
  std::int32_t head[3] = {};
  if (::pread(fd, head, sizeof head, 0) != static_cast<ssize_t>(sizeof head)) {
    return system_error(path, "cannot read", errno);
  }
  for (const LlmcFormat& format : kLlmcFormats) {
    if (head[0] != format.magic || head[1] != format.version) continue;
    const std::string what = token_file_text(path) + " has llm.c's header for " + format.ids +
                             " ids of " + std::to_string(format.token_bytes) + " bytes";
    if (token_bytes != format.token_bytes) {
      return error(StatusCode::invalid_argument,
                   what + ", but data.token_bytes = " + std::to_string(token_bytes) +
                       ": set data.token_bytes = " + std::to_string(format.token_bytes));
    }
    const std::int64_t payload = length - kLlmcHeaderBytes;
    if (head[2] < 0 || payload != std::int64_t{head[2]} * format.token_bytes) {
      return error(StatusCode::invalid_argument,
                   what + " and a count of " + std::to_string(head[2]) + " ids, but " +
                       std::to_string(payload) +
                       " bytes follow the header: the file is truncated or was not written "
                       "whole; write it again");
    }
    return kLlmcHeaderBytes;
  }
  return std::int64_t{0};
}

}  // namespace

Result<TokenFile> TokenFile::open(const std::string& path, int token_bytes, std::int64_t vocab,
                                  std::int64_t seq) {
  if (token_bytes != 2 && token_bytes != 4) {
    return error(StatusCode::invalid_argument,
                 "data.token_bytes must be 2 (uint16 ids) or 4 (uint32 ids), got " +
                     std::to_string(token_bytes));
  }
  const Descriptor file_descriptor(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  const int fd = file_descriptor.get();
  if (fd < 0) return system_error(path, "cannot open", errno);
  struct stat info {};
  if (fstat(fd, &info) != 0) return system_error(path, "cannot stat", errno);
  if (!S_ISREG(info.st_mode)) {
    return error(StatusCode::invalid_argument,
                 token_file_text(path) + " is not a regular file (check data.path)");
  }
  const auto length = static_cast<std::int64_t>(info.st_size);
  SPW_ASSIGN_OR_RETURN(const std::int64_t header_bytes,
                       llmc_header_bytes(path, fd, length, token_bytes));
  const std::int64_t id_bytes = length - header_bytes;
  if (id_bytes % token_bytes != 0) {
    return error(StatusCode::invalid_argument,
                 token_file_text(path) + " has " + std::to_string(length) +
                     " bytes, not a whole number of " + std::to_string(token_bytes) +
                     "-byte tokens: check data.token_bytes (2: uint16 ids, 4: uint32)");
  }
  const std::int64_t tokens = id_bytes / token_bytes;
  // Written as a subtraction so a huge seq cannot overflow seq + 2.
  if (tokens < 2 || tokens - 2 < seq) {
    return error(StatusCode::invalid_argument,
                 token_file_text(path) + " has " + std::to_string(tokens) +
                     " tokens, fewer than model.seq + 2 = " + std::to_string(seq + 2) +
                     ": use a larger file or a shorter model.seq");
  }
  void* address = mmap(nullptr, static_cast<std::size_t>(length), PROT_READ, MAP_PRIVATE, fd, 0);
  if (address == MAP_FAILED) return system_error(path, "cannot map", errno);
  auto mapping = std::make_shared<Mapping>();
  mapping->bytes = static_cast<const unsigned char*>(address);
  mapping->length = static_cast<std::size_t>(length);
  mapping->header_bytes = header_bytes;

  // mmap returns a page-aligned address and a header is 1 KiB, so the ids can be read in
  // place.
  const unsigned char* ids = mapping->bytes + header_bytes;
  const std::int64_t bad =
      token_bytes == 2
          ? first_out_of_range(reinterpret_cast<const std::uint16_t*>(ids), tokens, vocab)
          : first_out_of_range(reinterpret_cast<const std::uint32_t*>(ids), tokens, vocab);
  TokenFile file;
  file.mapping_ = std::move(mapping);
  file.size_ = tokens;
  file.token_bytes_ = token_bytes;
  file.path_ = path;
  if (bad >= 0) {
    std::uint32_t id = 0;
    std::memcpy(&id, file.first_byte() + bad * token_bytes, static_cast<std::size_t>(token_bytes));
    return error(StatusCode::invalid_argument,
                 token_file_text(path) + ": token " + std::to_string(id) + " at index " +
                     std::to_string(bad) + " is not below model.vocab = " + std::to_string(vocab) +
                     ": raise model.vocab, or check data.token_bytes (" +
                     std::to_string(token_bytes) + " now)");
  }
  return file;
}

const unsigned char* TokenFile::first_byte() const {
  return mapping_->bytes + mapping_->header_bytes + first_ * token_bytes_;
}

bool TokenFile::has_llmc_header() const { return mapping_->header_bytes > 0; }

std::uint64_t TokenFile::digest() const {
  return data_digest(first_byte(), static_cast<std::size_t>(size_ * token_bytes_));
}

std::int32_t TokenFile::token(std::int64_t i) const {
  const unsigned char* at = first_byte() + i * token_bytes_;
  if (token_bytes_ == 2) {
    std::uint16_t id = 0;
    std::memcpy(&id, at, sizeof id);
    return id;
  }
  std::uint32_t id = 0;
  std::memcpy(&id, at, sizeof id);
  return static_cast<std::int32_t>(id);  // below vocab, an int, as open() checked
}

Result<TokenFile> TokenFile::part(double holdout, std::int64_t seq, bool held_out) const {
  SPW_ASSIGN_OR_RETURN(const StreamPart range,
                       holdout_part(size_, holdout, seq, held_out, token_file_text(path_),
                                    "tokens"));
  TokenFile part = *this;
  part.first_ = first_ + range.first;
  part.size_ = range.count;
  return part;
}

Result<TokenFile> TokenFile::training_part(double holdout, std::int64_t seq) const {
  return part(holdout, seq, false);
}

Result<TokenFile> TokenFile::held_out_part(double holdout, std::int64_t seq) const {
  return part(holdout, seq, true);
}

void TokenFile::fill_batch(std::int64_t step, std::int64_t first_sample, std::int64_t count,
                           std::int64_t global_batch, std::int64_t seq, std::int32_t* tokens,
                           std::int32_t* targets) const {
  for (std::int64_t row = 0; row < count; ++row) {
    const std::int64_t start =
        sample_window_start(size_, step, first_sample + row, global_batch, seq);
    std::int32_t* row_tokens = tokens + row * seq;
    std::int32_t* row_targets = targets + row * seq;
    for (std::int64_t j = 0; j < seq; ++j) {
      row_tokens[j] = token(start + j);
      row_targets[j] = token(start + j + 1);
    }
  }
}

}  // namespace spw
