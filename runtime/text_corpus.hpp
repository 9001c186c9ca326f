// TextCorpus: the byte stream a byte-level GPT (vocab 256) trains on, and the fixed rule that
// picks each sample's window. Every rank loads the same bytes and evaluates the same formula, so
// microbatches and data-parallel replicas can each take their slice of a global batch without
// talking to one another, and a run is reproducible from (corpus digest, step, batch, seq).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/status.hpp"

namespace spw {

class TextCorpus {
 public:
  // Where the Debian package `fortunes` puts its text.
  static constexpr const char* kDefaultPath = "/usr/share/games/fortunes";

  // `path` is a file, or a directory whose regular files are taken recursively, skipping names
  // ending in ".dat" (the fortunes index files are binary) and every symbolic link, to a file or
  // a directory (fortunes ships *.u8 links back to the same text, which would double it). The
  // files are concatenated in byte-wise order of their full paths, so the stream does not depend
  // on the order the file system lists a directory. `path` itself is resolved if it is a link:
  // the user named it. A missing path is not_found, an unreadable file or directory io_error,
  // a directory with no eligible file not_found.
  static Result<TextCorpus> load(const std::string& path);
  // load(), then check_sequence(seq).
  static Result<TextCorpus> load(const std::string& path, std::int64_t seq);
  // A corpus over bytes already in memory; `origin` stands in for the path in messages.
  static TextCorpus from_bytes(std::vector<std::uint8_t> bytes, std::string origin);

  // invalid_argument unless seq >= 1 and the corpus holds at least seq + 2 bytes, the least
  // that leaves one window start. fill_batch() requires this to have passed for its seq.
  Status check_sequence(std::int64_t seq) const;

  // Start of sample `sample` of step `step`: sample_window_start() over the corpus's bytes.
  std::int64_t sample_offset(std::int64_t step, std::int64_t sample, std::int64_t global_batch,
                             std::int64_t seq) const;

  // Samples first_sample .. first_sample + count - 1 of the step's global batch: for each, seq
  // inputs bytes [o, o + seq) into `tokens` and seq targets bytes [o + 1, o + seq + 1) into
  // `targets`, row-major [count, seq], as token ids 0..255. Any slicing of a batch gives the
  // same rows as filling it whole. Requires check_sequence(seq) to be ok and the arguments to
  // be non-negative; if the corpus is too short anyway, the rows are zeros rather than garbage.
  void fill_batch(std::int64_t step, std::int64_t first_sample, std::int64_t count,
                  std::int64_t global_batch, std::int64_t seq, std::int32_t* tokens,
                  std::int32_t* targets) const;

  // The corpus split for evaluation: the held-out part is the last floor(size * holdout)
  // bytes, the training part the bytes before them, so no window of one overlaps the other.
  // Both keep the path and file count. invalid_argument naming data.holdout unless
  // 0 < holdout < 1 and each part holds at least seq + 2 bytes.
  Result<TextCorpus> training_part(double holdout, std::int64_t seq) const;
  Result<TextCorpus> held_out_part(double holdout, std::int64_t seq) const;

  std::int64_t size() const { return static_cast<std::int64_t>(bytes_.size()); }
  const std::vector<std::uint8_t>& bytes() const { return bytes_; }
  // The path given to load() (or from_bytes' origin) and how many files went into the stream.
  const std::string& path() const { return path_; }
  std::int64_t file_count() const { return file_count_; }
  // 64-bit FNV-1a of the bytes: lets a report show which corpus a run saw without the text.
  std::uint64_t digest() const { return digest_; }

 private:
  // training_part (held_out false) or held_out_part.
  Result<TextCorpus> part(double holdout, std::int64_t seq, bool held_out) const;

  std::vector<std::uint8_t> bytes_;
  std::string path_;
  std::int64_t file_count_ = 0;
  std::uint64_t digest_ = 0;
};

// 64-bit FNV-1a (offset basis 14695981039346656037, prime 1099511628211).
std::uint64_t fnv1a64(const std::uint8_t* data, std::size_t size);

}  // namespace spw
