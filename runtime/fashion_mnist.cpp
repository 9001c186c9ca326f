#include "runtime/fashion_mnist.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

namespace spw {
namespace {

// -Wpedantic objects to __int128 by name; __extension__ marks the use as deliberate.
__extension__ using Wide = unsigned __int128;

constexpr const char* kHowToFix =
    "install the Debian package dataset-fashion-mnist or set data.path";
constexpr std::uint32_t kImagesMagic = 2051;  // IDX: unsigned bytes, 3 dimensions
constexpr std::uint32_t kLabelsMagic = 2049;  // IDX: unsigned bytes, 1 dimension
// Bounds each gzread() call, whose length is an unsigned int.
constexpr std::size_t kChunk = std::size_t{1} << 20;

Status file_error(const std::string& path, const std::string& what) {
  return error(StatusCode::io_error, "fashion-mnist file " + path + ": " + what);
}

// gzclose on scope exit, whatever path the reader leaves by.
struct GzCloser {
  void operator()(gzFile_s* file) const { gzclose(file); }
};
using GzHandle = std::unique_ptr<gzFile_s, GzCloser>;

class IdxReader {
 public:
  static Result<IdxReader> open(const std::string& path) {
    errno = 0;
    gzFile file = gzopen(path.c_str(), "rb");
    if (file == nullptr) {
      const int saved = errno;
      const StatusCode code = saved == ENOENT ? StatusCode::not_found : StatusCode::io_error;
      const std::string reason = saved != 0 ? std::strerror(saved) : "out of memory";
      return error(
          code, "fashion-mnist file " + path + ": cannot open: " + reason + " (" + kHowToFix + ")");
    }
    return IdxReader(path, GzHandle(file));
  }

  // Appends exactly `size` bytes to `out`. Grows `out` only as data arrives, so a header that
  // claims billions of items fails as truncated instead of allocating for them up front.
  Status read(std::size_t size, std::vector<std::uint8_t>& out, const std::string& what) {
    std::size_t got = 0;
    while (got < size) {
      const std::size_t want = std::min(kChunk, size - got);
      const std::size_t at = out.size();
      out.resize(at + want);
      const int n = gzread(file_.get(), out.data() + at, static_cast<unsigned>(want));
      if (n < 0) return gz_failure();
      out.resize(at + static_cast<std::size_t>(n));
      got += static_cast<std::size_t>(n);
      // zlib reports a gzip stream cut short as a 0-byte read with an error set, not as -1.
      if (n == 0 && has_error()) return gz_failure();
      if (n == 0) {
        return file_error(path_, "truncated: expected " + std::to_string(size) + " bytes of " +
                                     what + ", the file ends after " + std::to_string(got));
      }
    }
    return Status::success();
  }

  Result<std::uint32_t> read_u32(const std::string& what) {
    std::vector<std::uint8_t> raw;
    SPW_TRY(read(4, raw, what));
    // IDX integers are big-endian.
    return (std::uint32_t{raw[0]} << 24) | (std::uint32_t{raw[1]} << 16) |
           (std::uint32_t{raw[2]} << 8) | std::uint32_t{raw[3]};
  }

  Status expect_magic(std::uint32_t expected, const char* kind) {
    SPW_ASSIGN_OR_RETURN(const std::uint32_t magic, read_u32("the magic number"));
    if (magic == expected) return Status::success();
    return file_error(path_, "bad magic number " + std::to_string(magic) + ", expected " +
                                 std::to_string(expected) + " (IDX " + kind + ")");
  }

  // A file longer than its header says was probably paired with the wrong header or mangled.
  Status expect_end(const std::string& what) {
    std::uint8_t extra = 0;
    const int n = gzread(file_.get(), &extra, 1);
    if (n < 0 || has_error()) return gz_failure();
    if (n > 0) {
      return file_error(path_, "data continues after the " + what + " its header declares");
    }
    return Status::success();
  }

 private:
  IdxReader(std::string path, GzHandle file) : path_(std::move(path)), file_(std::move(file)) {}

  bool has_error() {
    int code = Z_OK;
    gzerror(file_.get(), &code);
    return code != Z_OK;
  }

  Status gz_failure() {
    int code = Z_OK;
    const char* message = gzerror(file_.get(), &code);
    std::string reason = code == Z_ERRNO ? std::strerror(errno) : message;
    // zlib prefixes its messages with the path, which file_error() already names.
    const std::string prefix = path_ + ": ";
    if (reason.starts_with(prefix)) reason.erase(0, prefix.size());
    return file_error(path_, "corrupt, cut short or unreadable gzip data: " + reason);
  }

  std::string path_;
  GzHandle file_;
};

Result<std::vector<std::uint8_t>> read_images(const std::string& path, std::uint32_t& count) {
  SPW_ASSIGN_OR_RETURN(IdxReader reader, IdxReader::open(path));
  SPW_TRY(reader.expect_magic(kImagesMagic, "images"));
  SPW_ASSIGN_OR_RETURN(count, reader.read_u32("the image count"));
  SPW_ASSIGN_OR_RETURN(const std::uint32_t height, reader.read_u32("the image height"));
  SPW_ASSIGN_OR_RETURN(const std::uint32_t width, reader.read_u32("the image width"));
  if (height != ImageDataset::kHeight || width != ImageDataset::kWidth) {
    return file_error(path, "images are " + std::to_string(height) + "x" + std::to_string(width) +
                                ", expected 28x28");
  }
  std::vector<std::uint8_t> pixels;
  SPW_TRY(
      reader.read(std::size_t{count} * height * width, pixels, std::to_string(count) + " images"));
  SPW_TRY(reader.expect_end(std::to_string(count) + " images"));
  return pixels;
}

Result<std::vector<std::uint8_t>> read_labels(const std::string& path) {
  SPW_ASSIGN_OR_RETURN(IdxReader reader, IdxReader::open(path));
  SPW_TRY(reader.expect_magic(kLabelsMagic, "labels"));
  SPW_ASSIGN_OR_RETURN(const std::uint32_t count, reader.read_u32("the label count"));
  std::vector<std::uint8_t> labels;
  SPW_TRY(reader.read(count, labels, std::to_string(count) + " labels"));
  SPW_TRY(reader.expect_end(std::to_string(count) + " labels"));
  return labels;
}

}  // namespace

Result<ImageDataset> load_fashion_mnist(const std::string& dir, bool train) {
  const std::string prefix = dir + "/" + (train ? "train" : "t10k");
  ImageDataset set;
  set.images_path = prefix + "-images-idx3-ubyte.gz";
  set.labels_path = prefix + "-labels-idx1-ubyte.gz";

  std::uint32_t count = 0;
  SPW_ASSIGN_OR_RETURN(const std::vector<std::uint8_t> pixels, read_images(set.images_path, count));
  SPW_ASSIGN_OR_RETURN(const std::vector<std::uint8_t> labels, read_labels(set.labels_path));
  if (labels.size() != count) {
    return file_error(set.labels_path, "has " + std::to_string(labels.size()) + " labels but " +
                                           set.images_path + " has " + std::to_string(count) +
                                           " images");
  }
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] >= ImageDataset::kClasses) {
      return file_error(set.labels_path, "label " + std::to_string(labels[i]) + " of sample " +
                                             std::to_string(i) + " is outside [0, 10)");
    }
  }

  set.rows = count;
  set.pixels.resize(pixels.size());
  std::transform(pixels.begin(), pixels.end(), set.pixels.begin(),
                 [](std::uint8_t p) { return static_cast<float>(p) / 255.0f; });
  set.labels.assign(labels.begin(), labels.end());
  return set;
}

std::int64_t ImageDataset::sample_row(std::int64_t step, std::int64_t sample,
                                      std::int64_t global_batch) const {
  if (rows <= 0) return 0;
  const auto modulus = static_cast<std::uint64_t>(rows);
  const auto residue = [modulus](std::int64_t v) {
    return static_cast<std::uint64_t>(v) % modulus;
  };
  // Residues multiply in 128 bits, so step * global_batch never wraps however long the run.
  return static_cast<std::int64_t>((Wide{residue(step)} * residue(global_batch) + residue(sample)) %
                                   modulus);
}

void ImageDataset::fill_batch(std::int64_t step, std::int64_t first_sample, std::int64_t count,
                              std::int64_t global_batch, float* x,
                              std::int32_t* batch_labels) const {
  if (rows <= 0) return;
  for (std::int64_t i = 0; i < count; ++i) {
    const std::int64_t row = sample_row(step, first_sample + i, global_batch);
    const float* source = pixels.data() + row * features;
    std::copy(source, source + features, x + i * features);
    batch_labels[i] = labels[static_cast<std::size_t>(row)];
  }
}

}  // namespace spw
