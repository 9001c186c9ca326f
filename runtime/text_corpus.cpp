#include "runtime/text_corpus.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "runtime/sample_window.hpp"

namespace spw {
namespace {

namespace fs = std::filesystem;

constexpr const char* kHowToFix = "install the Debian package fortunes or set data.path";
// The fortunes package's binary index files, which are not text.
constexpr std::string_view kSkippedSuffix = ".dat";

Status file_error(const std::string& path, const std::string& what, std::error_code ec) {
  const StatusCode code =
      ec == std::errc::no_such_file_or_directory ? StatusCode::not_found : StatusCode::io_error;
  return error(code,
               "text corpus " + path + ": " + what + ": " + ec.message() + " (" + kHowToFix + ")");
}

bool skipped_name(const fs::path& path) {
  return path.filename().string().ends_with(kSkippedSuffix);
}

// The files that make up the stream, in stream order.
Result<std::vector<std::string>> list_files(const std::string& root) {
  std::error_code ec;
  const fs::file_status root_status = fs::status(root, ec);
  if (ec) return file_error(root, "cannot open", ec);
  if (fs::is_regular_file(root_status)) return std::vector<std::string>{root};
  if (!fs::is_directory(root_status)) {
    return error(
        StatusCode::io_error,
        "text corpus " + root + ": neither a regular file nor a directory (" + kHowToFix + ")");
  }

  std::vector<std::string> files;
  // Without directory_options::follow_directory_symlink the walk never enters a linked
  // directory; linked files are dropped below by their own (not their target's) status.
  fs::recursive_directory_iterator it(root, fs::directory_options::none, ec);
  if (ec) return file_error(root, "cannot list directory", ec);
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const fs::file_status status = it->symlink_status(ec);
    if (ec) return file_error(it->path().string(), "cannot stat", ec);
    if (fs::is_symlink(status) || !fs::is_regular_file(status)) continue;
    if (skipped_name(it->path())) continue;
    files.push_back(it->path().string());
  }
  if (ec) return file_error(root, "cannot list directory", ec);
  if (files.empty()) {
    const std::string why = ": no text files, symbolic links and *.dat being skipped (";
    return error(StatusCode::not_found, "text corpus " + root + why + kHowToFix + ")");
  }
  // std::string compares through char_traits<char>, which orders as unsigned bytes.
  std::sort(files.begin(), files.end());
  return files;
}

Status append_file(const std::string& path, std::vector<std::uint8_t>& out) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) return file_error(path, "cannot open", {errno, std::generic_category()});
  std::uint8_t buffer[1 << 16];
  std::size_t got = 0;
  while ((got = std::fread(buffer, 1, sizeof buffer, file)) > 0) {
    out.insert(out.end(), buffer, buffer + got);
  }
  const bool failed = std::ferror(file) != 0;
  const int saved_errno = errno;
  std::fclose(file);
  if (failed) return file_error(path, "cannot read", {saved_errno, std::generic_category()});
  return Status::success();
}

}  // namespace

std::uint64_t fnv1a64(const std::uint8_t* data, std::size_t size) {
  std::uint64_t hash = 14695981039346656037ULL;
  for (std::size_t i = 0; i < size; ++i) {
    hash ^= data[i];
    hash *= 1099511628211ULL;
  }
  return hash;
}

Result<TextCorpus> TextCorpus::load(const std::string& path) {
  SPW_ASSIGN_OR_RETURN(const std::vector<std::string> files, list_files(path));
  std::vector<std::uint8_t> bytes;
  for (const std::string& file : files) SPW_TRY(append_file(file, bytes));
  TextCorpus corpus = from_bytes(std::move(bytes), path);
  corpus.file_count_ = static_cast<std::int64_t>(files.size());
  return corpus;
}

Result<TextCorpus> TextCorpus::load(const std::string& path, std::int64_t seq) {
  SPW_ASSIGN_OR_RETURN(TextCorpus corpus, load(path));
  SPW_TRY(corpus.check_sequence(seq));
  return corpus;
}

TextCorpus TextCorpus::from_bytes(std::vector<std::uint8_t> bytes, std::string origin) {
  TextCorpus corpus;
  corpus.digest_ = fnv1a64(bytes.data(), bytes.size());
  corpus.bytes_ = std::move(bytes);
  corpus.path_ = std::move(origin);
  return corpus;
}

Result<TextCorpus> TextCorpus::part(double holdout, std::int64_t seq, bool held_out) const {
  SPW_ASSIGN_OR_RETURN(const StreamPart range,
                       holdout_part(size(), holdout, seq, held_out, "text corpus " + path_,
                                    "bytes"));
  const auto begin = bytes_.begin() + range.first;
  TextCorpus corpus = from_bytes(std::vector<std::uint8_t>(begin, begin + range.count), path_);
  corpus.file_count_ = file_count_;
  return corpus;
}

Result<TextCorpus> TextCorpus::training_part(double holdout, std::int64_t seq) const {
  return part(holdout, seq, false);
}

Result<TextCorpus> TextCorpus::held_out_part(double holdout, std::int64_t seq) const {
  return part(holdout, seq, true);
}

Status TextCorpus::check_sequence(std::int64_t seq) const {
  if (seq < 1) {
    return error(StatusCode::invalid_argument, "text corpus " + path_ + ": sequence length " +
                                                   std::to_string(seq) + " must be at least 1");
  }
  // Written as a subtraction so a huge seq cannot overflow seq + 2.
  if (size() < 2 || size() - 2 < seq) {
    return error(StatusCode::invalid_argument,
                 "text corpus " + path_ + " has " + std::to_string(size()) +
                     " bytes, fewer than sequence length " + std::to_string(seq) +
                     " + 2 needs; use a larger corpus or a shorter model.seq");
  }
  return Status::success();
}

std::int64_t TextCorpus::sample_offset(std::int64_t step, std::int64_t sample,
                                       std::int64_t global_batch, std::int64_t seq) const {
  return sample_window_start(size(), step, sample, global_batch, seq);
}

void TextCorpus::fill_batch(std::int64_t step, std::int64_t first_sample, std::int64_t count,
                            std::int64_t global_batch, std::int64_t seq, std::int32_t* tokens,
                            std::int32_t* targets) const {
  if (count <= 0 || seq <= 0) return;
  const bool usable = check_sequence(seq).ok();
  for (std::int64_t row = 0; row < count; ++row) {
    std::int32_t* row_tokens = tokens + row * seq;
    std::int32_t* row_targets = targets + row * seq;
    if (!usable) {
      std::fill(row_tokens, row_tokens + seq, 0);
      std::fill(row_targets, row_targets + seq, 0);
      continue;
    }
    const std::uint8_t* window =
        bytes_.data() + sample_offset(step, first_sample + row, global_batch, seq);
    std::copy(window, window + seq, row_tokens);
    std::copy(window + 1, window + seq + 1, row_targets);
  }
}

}  // namespace spw
