// A bad data file must stop a run with a message that names the file and the defect, and a good
// one must decode to exactly the bytes it holds, in file order: tiny fixtures written with zlib
// check both, and the installed dataset checks the real thing.
#include "runtime/fashion_mnist.hpp"

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "temp_dir.hpp"

namespace spw {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

constexpr int kPixels = 28 * 28;
constexpr const char* kHowToFix =
    "install the Debian package dataset-fashion-mnist or set data.path";

void put_u32(Bytes& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<std::uint8_t>(v >> shift));
}

Bytes idx_images(std::uint32_t count, std::uint32_t height, std::uint32_t width,
                 const Bytes& pixels, std::uint32_t magic = 2051) {
  Bytes out;
  for (std::uint32_t v : {magic, count, height, width}) put_u32(out, v);
  out.insert(out.end(), pixels.begin(), pixels.end());
  return out;
}

Bytes idx_labels(std::uint32_t count, const Bytes& labels, std::uint32_t magic = 2049) {
  Bytes out;
  for (std::uint32_t v : {magic, count}) put_u32(out, v);
  out.insert(out.end(), labels.begin(), labels.end());
  return out;
}

void write_gz(const std::string& path, const Bytes& data) {
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr) << path;
  if (!data.empty()) {
    ASSERT_EQ(gzwrite(file, data.data(), static_cast<unsigned>(data.size())),
              static_cast<int>(data.size()));
  }
  ASSERT_EQ(gzclose(file), Z_OK);
}

// Pixel k of image i is (7 * i + k) mod 256: every image differs and every byte value occurs.
Bytes pixel_pattern(int images) {
  Bytes pixels(static_cast<std::size_t>(images * kPixels));
  for (int i = 0; i < images; ++i) {
    for (int k = 0; k < kPixels; ++k) {
      pixels[static_cast<std::size_t>(i * kPixels + k)] =
          static_cast<std::uint8_t>((7 * i + k) % 256);
    }
  }
  return pixels;
}

// A valid three-image train set with labels 9, 0, 4.
void write_valid(const TempDir& dir, const std::string& prefix = "train") {
  write_gz(dir.file(prefix + "-images-idx3-ubyte.gz"), idx_images(3, 28, 28, pixel_pattern(3)));
  write_gz(dir.file(prefix + "-labels-idx1-ubyte.gz"), idx_labels(3, {9, 0, 4}));
}

Status load_error(const TempDir& dir) {
  Result<ImageDataset> set = load_fashion_mnist(dir.dir(), true);
  EXPECT_FALSE(set.ok());
  return set.status();
}

TEST(FashionMnist, ReadsATinyFixtureExactly) {
  TempDir dir("spw-fmnist");
  write_valid(dir);
  Result<ImageDataset> set = load_fashion_mnist(dir.dir(), true);
  ASSERT_TRUE(set.ok()) << set.status().message();
  EXPECT_EQ(set->rows, 3);
  EXPECT_EQ(set->features, 784);
  EXPECT_EQ(set->labels, (std::vector<std::int32_t>{9, 0, 4}));
  const Bytes pixels = pixel_pattern(3);
  ASSERT_EQ(set->pixels.size(), pixels.size());
  for (std::size_t k = 0; k < pixels.size(); ++k) {
    ASSERT_EQ(set->pixels[k], static_cast<float>(pixels[k]) / 255.0f) << k;
  }
  EXPECT_EQ(set->pixels[255], 1.0f);  // image 0, byte 255
  EXPECT_EQ(set->images_path, dir.file("train-images-idx3-ubyte.gz"));
}

TEST(FashionMnist, TestSplitReadsTheT10kFiles) {
  TempDir dir("spw-fmnist");
  write_valid(dir, "t10k");
  EXPECT_TRUE(load_fashion_mnist(dir.dir(), false).ok());
  const Status missing_train = load_error(dir);
  EXPECT_EQ(missing_train.code(), StatusCode::not_found);
}

TEST(FashionMnist, MissingFileIsNotFoundAndSaysHowToFix) {
  TempDir dir("spw-fmnist");
  const std::string images = dir.file("train-images-idx3-ubyte.gz");
  const Status status = load_error(dir);
  EXPECT_EQ(status.code(), StatusCode::not_found);
  EXPECT_EQ(status.message(), "fashion-mnist file " + images +
                                  ": cannot open: No such file or directory (" + kHowToFix + ")");

  write_gz(images, idx_images(3, 28, 28, pixel_pattern(3)));
  const Status no_labels = load_error(dir);
  EXPECT_EQ(no_labels.code(), StatusCode::not_found);
  EXPECT_NE(no_labels.message().find(dir.file("train-labels-idx1-ubyte.gz")), std::string::npos)
      << no_labels.message();
}

TEST(FashionMnist, BadMagicNumbersAreNamed) {
  TempDir dir("spw-fmnist");
  write_valid(dir);
  const std::string images = dir.file("train-images-idx3-ubyte.gz");
  write_gz(images, idx_images(3, 28, 28, pixel_pattern(3), 2049));
  Status status = load_error(dir);
  EXPECT_EQ(status.code(), StatusCode::io_error);
  EXPECT_EQ(status.message(),
            "fashion-mnist file " + images + ": bad magic number 2049, expected 2051 (IDX images)");

  write_valid(dir);
  const std::string labels = dir.file("train-labels-idx1-ubyte.gz");
  write_gz(labels, idx_labels(3, {9, 0, 4}, 0x1f8b0808));
  status = load_error(dir);
  EXPECT_EQ(status.message(), "fashion-mnist file " + labels +
                                  ": bad magic number 529205256, expected 2049 (IDX labels)");
}

TEST(FashionMnist, ImagesOtherThan28x28AreRejected) {
  TempDir dir("spw-fmnist");
  write_valid(dir);
  const std::string images = dir.file("train-images-idx3-ubyte.gz");
  write_gz(images, idx_images(1, 28, 27, Bytes(28 * 27)));
  EXPECT_EQ(load_error(dir).message(),
            "fashion-mnist file " + images + ": images are 28x27, expected 28x28");
}

TEST(FashionMnist, TruncatedFilesAreNamed) {
  TempDir dir("spw-fmnist");
  write_valid(dir);
  const std::string images = dir.file("train-images-idx3-ubyte.gz");
  write_gz(images, idx_images(3, 28, 28, pixel_pattern(2)));
  Status status = load_error(dir);
  EXPECT_EQ(status.code(), StatusCode::io_error);
  EXPECT_EQ(status.message(), "fashion-mnist file " + images +
                                  ": truncated: expected 2352 bytes of 3 images, the file ends "
                                  "after 1568");

  write_gz(images, {0, 0, 8, 3, 0, 0});
  EXPECT_EQ(load_error(dir).message(),
            "fashion-mnist file " + images +
                ": truncated: expected 4 bytes of the image count, the file ends after 2");

  // A header promising four billion images must fail as truncated, not try to allocate.
  write_gz(images, idx_images(0xffffffffU, 28, 28, pixel_pattern(1)));
  EXPECT_NE(load_error(dir).message().find("bytes of 4294967295 images, the file ends after 784"),
            std::string::npos);
}

TEST(FashionMnist, CutGzipStreamIsAnIoError) {
  TempDir dir("spw-fmnist");
  write_valid(dir);
  const std::string images = dir.file("train-images-idx3-ubyte.gz");
  Bytes compressed;
  {
    std::ifstream in(images, std::ios::binary);
    compressed.assign(std::istreambuf_iterator<char>(in), {});
  }
  compressed.resize(compressed.size() / 2);
  std::ofstream(images, std::ios::binary)
      .write(reinterpret_cast<const char*>(compressed.data()),
             static_cast<std::streamsize>(compressed.size()));
  const Status status = load_error(dir);
  EXPECT_EQ(status.code(), StatusCode::io_error);
  EXPECT_EQ(status.message(),
            "fashion-mnist file " + images +
                ": corrupt, cut short or unreadable gzip data: unexpected end of file");
}

TEST(FashionMnist, ImageAndLabelCountsMustMatch) {
  TempDir dir("spw-fmnist");
  write_valid(dir);
  const std::string labels = dir.file("train-labels-idx1-ubyte.gz");
  write_gz(labels, idx_labels(2, {9, 0}));
  const Status status = load_error(dir);
  EXPECT_EQ(status.code(), StatusCode::io_error);
  EXPECT_EQ(status.message(), "fashion-mnist file " + labels + ": has 2 labels but " +
                                  dir.file("train-images-idx3-ubyte.gz") + " has 3 images");
}

TEST(FashionMnist, LabelsOutsideTheTenClassesAreRejected) {
  TempDir dir("spw-fmnist");
  write_valid(dir);
  const std::string labels = dir.file("train-labels-idx1-ubyte.gz");
  write_gz(labels, idx_labels(3, {9, 10, 4}));
  EXPECT_EQ(load_error(dir).message(),
            "fashion-mnist file " + labels + ": label 10 of sample 1 is outside [0, 10)");
}

TEST(FashionMnist, DataBeyondTheHeaderCountIsRejected) {
  TempDir dir("spw-fmnist");
  write_valid(dir);
  const std::string labels = dir.file("train-labels-idx1-ubyte.gz");
  write_gz(labels, idx_labels(3, {9, 0, 4, 1}));
  EXPECT_EQ(
      load_error(dir).message(),
      "fashion-mnist file " + labels + ": data continues after the 3 labels its header declares");
}

TEST(FashionMnist, BatchesRunInFileOrderAndWrapIntoTheNextEpoch) {
  TempDir dir("spw-fmnist");
  write_valid(dir);
  Result<ImageDataset> set = load_fashion_mnist(dir.dir(), true);
  ASSERT_TRUE(set.ok()) << set.status().message();
  // Three rows, batch 2: step 0 is rows 0, 1; step 1 is rows 2, 0; step 2 is rows 1, 2.
  const std::pair<std::int64_t, std::vector<std::int64_t>> expected[] = {
      {0, {0, 1}}, {1, {2, 0}}, {2, {1, 2}}};
  for (const auto& [step, rows] : expected) {
    std::vector<float> x(2 * kPixels);
    std::vector<std::int32_t> labels(2);
    set->fill_batch(step, 0, 2, 2, x.data(), labels.data());
    for (std::size_t i = 0; i < 2; ++i) {
      const auto row = static_cast<std::size_t>(rows[i]);
      EXPECT_EQ(labels[i], set->labels[row]) << "step " << step;
      EXPECT_TRUE(std::equal(x.begin() + static_cast<std::ptrdiff_t>(i * kPixels),
                             x.begin() + static_cast<std::ptrdiff_t>((i + 1) * kPixels),
                             set->pixels.begin() + static_cast<std::ptrdiff_t>(row * kPixels)))
          << "step " << step;
    }
  }
  // (2^62 * 5 + 4) mod 3 = (1 * 2 + 1) mod 3 = 0, where a 64-bit product would wrap.
  EXPECT_EQ(set->sample_row(std::int64_t{1} << 62, 4, 5), 0);
}

TEST(FashionMnist, SlicesOfABatchEqualTheWholeBatch) {
  TempDir dir("spw-fmnist");
  write_valid(dir);
  Result<ImageDataset> set = load_fashion_mnist(dir.dir(), true);
  ASSERT_TRUE(set.ok()) << set.status().message();
  constexpr std::int64_t kBatch = 5, kStep = 7;
  std::vector<float> whole_x(kBatch * kPixels), x(kBatch * kPixels, -1.0f);
  std::vector<std::int32_t> whole_labels(kBatch), labels(kBatch, -1);
  set->fill_batch(kStep, 0, kBatch, kBatch, whole_x.data(), whole_labels.data());
  for (auto [first, count] : {std::pair<std::int64_t, std::int64_t>{0, 2}, {2, 3}}) {
    set->fill_batch(kStep, first, count, kBatch, x.data() + first * kPixels, labels.data() + first);
  }
  EXPECT_EQ(x, whole_x);
  EXPECT_EQ(labels, whole_labels);
}

// The setup script installs dataset-fashion-mnist, so its absence is a failure, not a skip.
TEST(FashionMnist, RealDatasetLoads) {
  for (bool train : {true, false}) {
    Result<ImageDataset> set = load_fashion_mnist(kFashionMnistDefaultDir, train);
    ASSERT_TRUE(set.ok()) << set.status().message();
    EXPECT_EQ(set->rows, train ? 60000 : 10000);
    EXPECT_EQ(set->features, 784);
    ASSERT_EQ(set->pixels.size(), static_cast<std::size_t>(set->rows * 784));
    const auto [low, high] = std::minmax_element(set->pixels.begin(), set->pixels.end());
    EXPECT_EQ(*low, 0.0f);
    EXPECT_EQ(*high, 1.0f);
    for (std::int32_t label : set->labels) {
      ASSERT_GE(label, 0);
      ASSERT_LT(label, 10);
    }
    // File order: the first labels as the dataset publishes them.
    const std::vector<std::int32_t> first =
        train ? std::vector<std::int32_t>{9, 0, 0, 3, 0, 2, 7, 2, 5, 5}
              : std::vector<std::int32_t>{9, 2, 1, 1, 6, 1, 4, 6, 5, 7};
    EXPECT_TRUE(std::equal(first.begin(), first.end(), set->labels.begin()));
    if (train) {
      double first_image = 0.0;
      for (int k = 0; k < kPixels; ++k) first_image += set->pixels[static_cast<std::size_t>(k)];
      EXPECT_NEAR(first_image, 76247.0 / 255.0, 1e-3);  // the byte sum of image 0
    }
  }
}

}  // namespace
}  // namespace spw
