// TokenFile: a corpus tokenized ahead of time, as a flat file of token ids, little-endian, 2
// bytes a token (uint16: what nanoGPT's prepare scripts write to train.bin, for vocabularies
// of up to 65,536 ids) or 4 (uint32), either from the first byte or after llm.c's header (256
// int32s: magic 20240520 version 1 for uint16 ids, 20240801 version 7 for uint32, then the
// count of ids; what llm.c's dev/data scripts write), which open() recognises by itself. The file
// is mapped read-only rather than read, so a corpus of many GiB costs a rank no heap and the ranks
// of a node share its pages. Windows are drawn with the text corpus's formula (sample_window.hpp),
// so the bytes of a text stored as 2-byte tokens give exactly the text corpus's batches.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kernels/status.hpp"

namespace spw {

class TokenFile {
 public:
  // Maps `path` and checks every id once, so that a bad file fails before training rather
  // than hours into it. not_found for a missing file, io_error for one that cannot be opened
  // or mapped; invalid_argument, naming the key to change, when token_bytes is not 2 or 4 or
  // not the width an llm.c header names, that header's count disagrees with the file's size,
  // the size is not a whole number of tokens, the file holds fewer than seq + 2 tokens (the
  // least that leaves one window), or an id is not below `vocab` (the first such).
  static Result<TokenFile> open(const std::string& path, int token_bytes, std::int64_t vocab,
                                std::int64_t seq);

  // The file split for evaluation, as TextCorpus splits text: the held-out part is the last
  // floor(size * holdout) tokens, the training part those before, sharing one mapping.
  // invalid_argument naming data.holdout unless 0 < holdout < 1 and each part holds at least
  // seq + 2 tokens.
  Result<TokenFile> training_part(double holdout, std::int64_t seq) const;
  Result<TokenFile> held_out_part(double holdout, std::int64_t seq) const;

  // Samples first_sample .. first_sample + count - 1 of the step's global batch, as
  // TextCorpus::fill_batch: seq inputs from the sample's window start and the seq targets one
  // token later, row-major [count, seq]. Requires seq + 2 <= size().
  void fill_batch(std::int64_t step, std::int64_t first_sample, std::int64_t count,
                  std::int64_t global_batch, std::int64_t seq, std::int32_t* tokens,
                  std::int32_t* targets) const;

  // Tokens in this part, and token i of it.
  std::int64_t size() const { return size_; }
  std::int32_t token(std::int64_t i) const;
  const std::string& path() const { return path_; }
  int token_bytes() const { return token_bytes_; }
  bool has_llmc_header() const;
  // data_digest() of this part's bytes, computed at each call (a pass over them).
  std::uint64_t digest() const;

 private:
  struct Mapping;

  Result<TokenFile> part(double holdout, std::int64_t seq, bool held_out) const;
  const unsigned char* first_byte() const;

  std::shared_ptr<const Mapping> mapping_;
  std::int64_t first_ = 0;  // this part's first token in the file
  std::int64_t size_ = 0;
  int token_bytes_ = 2;
  std::string path_;
};

}  // namespace spw
