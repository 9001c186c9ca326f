// Fashion-MNIST as the mlp trains on it: the gzip IDX files of the Debian package
// dataset-fashion-mnist, decoded once into flat arrays, then batched in file order. The issue
// asks for the train set in file order, with no shuffling, so every rank can compute any
// sample's index from the step alone and a run is reproducible without a sampler state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/status.hpp"

namespace spw {

// Where the Debian package dataset-fashion-mnist installs the files.
inline constexpr const char* kFashionMnistDefaultDir = "/usr/share/datasets/fashion-mnist";

struct ImageDataset {
  static constexpr std::int64_t kHeight = 28;
  static constexpr std::int64_t kWidth = 28;
  static constexpr std::int32_t kClasses = 10;

  std::int64_t rows = 0;
  std::int64_t features = kHeight * kWidth;
  std::vector<float> pixels;         // [rows, features], row-major, byte / 255 in [0, 1]
  std::vector<std::int32_t> labels;  // [rows], each in [0, kClasses)
  std::string images_path;           // for reports and messages
  std::string labels_path;

  // Sample i (first_sample <= i < first_sample + count) of step `step` is row
  // (step * global_batch + i) mod rows: batch k of an epoch is rows [k*B, (k+1)*B), and a batch
  // that runs past the last row continues from row 0 of the next epoch (so with rows not a
  // multiple of B, epochs do not start on a batch boundary). Writes count rows of `features`
  // floats to x and count labels. Exact for all non-negative arguments; any slicing of a
  // batch gives the same rows as filling it whole. Nothing is written if the set is empty.
  void fill_batch(std::int64_t step, std::int64_t first_sample, std::int64_t count,
                  std::int64_t global_batch, float* x, std::int32_t* batch_labels) const;
  // The row that fill_batch() uses for a sample.
  std::int64_t sample_row(std::int64_t step, std::int64_t sample, std::int64_t global_batch) const;
};

// train: the 60,000 rows of train-images-idx3-ubyte.gz / train-labels-idx1-ubyte.gz in `dir`;
// otherwise the 10,000 of t10k-*. A missing file is not_found; anything else wrong with a file
// is io_error: unreadable, corrupt gzip, truncated, longer than its header says, a bad magic
// number, images other than 28x28, a label outside [0, 10), or image and label counts that
// differ. Every message names the file and what is wrong in one line.
Result<ImageDataset> load_fashion_mnist(const std::string& dir, bool train);

}  // namespace spw
