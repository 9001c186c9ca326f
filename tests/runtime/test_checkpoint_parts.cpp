// Parameters that are rows of a bigger tensor (NamedParameter::part) are checkpointed as that
// tensor: a model with a layer split across two blocks saves the unsplit layer's datasets and
// optimizer state, loads them back into any split or none, and parts that do not fill their
// tensor exactly once are refused by name before anything is written.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "runtime/checkpoint.hpp"
#include "runtime/job_config.hpp"
#include "runtime/train_command.hpp"
#include "runtime/trainer.hpp"

namespace spw {
namespace {

namespace fs = std::filesystem;

class CheckpointParts : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("spw_checkpoint_parts_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

Tensor filled(const Shape& shape, float first) {
  auto t = Tensor::zeros(shape, MemoryCategory::parameters);
  EXPECT_TRUE(t.ok()) << t.status().message();
  for (std::int64_t i = 0; i < t->numel(); ++i) t->data()[i] = first + static_cast<float>(i);
  return std::move(t).value();
}

std::vector<float> values(const Tensor& t) { return {t.data(), t.data() + t.numel()}; }

TensorPart rows_of(const std::string& whole, std::vector<std::int64_t> shape,
                   std::vector<RowRange> rows) {
  return {whole, std::move(shape), std::move(rows)};
}

TEST_F(CheckpointParts, TwoPartsMakeOneDatasetAndLoadIntoTheWholeAndIntoOtherParts) {
  // w is [6, 2]; part a holds rows 0 and 3..4, part b rows 1..2 and 5.
  Tensor a = filled({3, 2}, 100), b = filled({3, 2}, 200);
  const std::vector<NamedParameter> parts{
      {"w_a", &a, nullptr, rows_of("w", {6, 2}, {{0, 1}, {3, 5}})},
      {"w_b", &b, nullptr, rows_of("w", {6, 2}, {{1, 3}, {5, 6}})}};
  ASSERT_TRUE(save_checkpoint(path("parts.h5"), parts, nullptr, {}).ok());

  Tensor whole = filled({6, 2}, 0);
  ASSERT_TRUE(load_parameters(path("parts.h5"), {{"w", &whole}}).ok());
  EXPECT_EQ(values(whole), (std::vector<float>{100, 101, 200, 201, 202, 203,  // rows 0, 1, 2
                                               102, 103, 104, 105, 204, 205}));  // rows 3, 4, 5

  // The other way round: the whole tensor into a split of other rows.
  ASSERT_TRUE(save_checkpoint(path("whole.h5"), {{"w", &whole}}, nullptr, {}).ok());
  Tensor top = filled({4, 2}, 0), bottom = filled({2, 2}, 0);
  ASSERT_TRUE(load_parameters(path("whole.h5"),
                              {{"top", &top, nullptr, rows_of("w", {6, 2}, {{0, 4}})},
                               {"bottom", &bottom, nullptr, rows_of("w", {6, 2}, {{4, 6}})}})
                  .ok());
  EXPECT_EQ(values(top), std::vector<float>(whole.data(), whole.data() + 8));
  EXPECT_EQ(values(bottom), std::vector<float>(whole.data() + 8, whole.data() + 12));
}

TEST_F(CheckpointParts, PartsThatDoNotFillTheirTensorExactlyOnceAreRefused) {
  Tensor a = filled({2, 2}, 0), b = filled({3, 2}, 0), c = filled({2, 2}, 0);
  const auto refused = [&](const std::vector<NamedParameter>& params) {
    const std::string file = path("refused.h5");
    const Status status = save_checkpoint(file, params, nullptr, {});
    EXPECT_FALSE(fs::exists(file));
    EXPECT_TRUE(fs::is_empty(dir_)) << "a temporary was left behind";
    return status.message();
  };
  EXPECT_EQ(refused({{"a", &a, nullptr, rows_of("w", {6, 2}, {{0, 2}})},
                     {"b", &b, nullptr, rows_of("w", {6, 2}, {{3, 6}})}}),
            "writing checkpoint " + path("refused.h5") +
                ": checkpoint dataset 'w': rows 2..2 are held by no parameter");
  EXPECT_NE(refused({{"a", &a, nullptr, rows_of("w", {6, 2}, {{0, 2}})},
                     {"b", &b, nullptr, rows_of("w", {6, 2}, {{1, 4}})}})
                .find("checkpoint dataset 'w': rows 1..1 are held by two parameters"),
            std::string::npos);
  EXPECT_NE(refused({{"a", &a, nullptr, rows_of("w", {6, 2}, {{0, 2}})},
                     {"b", &b, nullptr, rows_of("w", {6, 2}, {{2, 5}})}})
                .find("rows 5..5 are held by no parameter"),
            std::string::npos);
  EXPECT_NE(refused({{"a", &a, nullptr, rows_of("w", {6, 2}, {{0, 2}})},
                     {"b", &b, nullptr, rows_of("w", {5, 2}, {{2, 5}})}})
                .find("the parts of checkpoint dataset 'w' disagree on its shape"),
            std::string::npos);
  EXPECT_NE(refused({{"w", &c}, {"b", &b, nullptr, rows_of("w", {6, 2}, {{2, 5}})}})
                .find("parameter 'w' is listed twice"),
            std::string::npos);
  // A part's rows must add up to its own rows, ascending, inside the whole tensor.
  EXPECT_NE(refused({{"a", &a, nullptr, rows_of("w", {6, 2}, {{0, 3}})}})
                .find("parameter 'a' [2, 2] is not an ascending choice of rows of 'w'"),
            std::string::npos);
  EXPECT_NE(refused({{"a", &a, nullptr, rows_of("w", {6, 2}, {{4, 5}, {0, 1}})}})
                .find("is not an ascending choice of rows of 'w'"),
            std::string::npos);
  EXPECT_NE(refused({{"a", &a, nullptr, rows_of("w", {6, 3}, {{0, 2}})}})
                .find("is not an ascending choice of rows of 'w'"),
            std::string::npos);
}

TrainSettings tiny_gpt(const std::string& splits) {
  auto job = parse_job_string(
      "[model]\nkind = \"gpt\"\nlayers = 3\nd_model = 32\nheads = 4\nseq = 16\n" + splits +
          "[data]\nsource = \"synthetic\"\n"
          "[train]\nbatch = 8\nsteps = 6\nlr = 0.01\noptimizer = \"adamw\"\nmicrobatches = 2\n",
      "tiny.toml", {});
  EXPECT_TRUE(job.ok()) << job.status().message();
  auto settings = train_settings_from(*job);
  EXPECT_TRUE(settings.ok()) << settings.status().message();
  return *settings;
}

// Every tensor a trainer holds, under the name its checkpoint stores it by: a part's rows
// are put in place in a tensor of its whole shape, so a split and an unsplit model compare.
struct Stored {
  std::map<std::string, std::vector<float>> tensors;  // parameters and "name/state" entries

  void put(const NamedParameter& p, const Tensor& t, const std::string& suffix) {
    if (!p.part) {
      tensors[p.name + suffix] = values(t);
      return;
    }
    std::int64_t whole = 1;
    for (std::int64_t d : p.part->whole_shape) whole *= d;
    auto& out = tensors[p.part->whole + suffix];
    out.resize(static_cast<std::size_t>(whole));
    const std::int64_t row = t.numel() / t.shape()[0];
    const float* from = t.data();
    for (const RowRange& r : p.part->rows) {
      std::memcpy(out.data() + r.begin * row, from,
                  static_cast<std::size_t>((r.end - r.begin) * row) * sizeof(float));
      from += (r.end - r.begin) * row;
    }
  }
};

Stored stored(Trainer& trainer) {
  Stored out;
  for (const auto& p : trainer.model().parameters()) out.put(p, *p.value, "");
  Optimizer& optimizer = trainer.optimizer();
  for (std::size_t i = 0; i < optimizer.parameters().size(); ++i) {
    for (std::size_t slot = 0; slot < optimizer.state_names().size(); ++slot) {
      out.put(optimizer.parameters()[i], optimizer.state(i, slot),
              "/" + optimizer.state_names()[slot]);
    }
  }
  return out;
}

std::unique_ptr<Trainer> trained(TrainSettings settings, const std::string& resume_from,
                                 int steps, std::vector<double>* loss = nullptr) {
  settings.resume_from = resume_from;
  auto trainer = Trainer::create(settings);
  EXPECT_TRUE(trainer.ok()) << trainer.status().message();
  if (!trainer.ok()) return nullptr;
  for (int i = 0; i < steps; ++i) {
    StepResult step;
    EXPECT_TRUE((*trainer)->run_step(step).ok());
    if (loss != nullptr) loss->push_back(step.loss);
  }
  return std::move(trainer).value();
}

TEST_F(CheckpointParts, ASplitModelResumesIntoAnotherSplitOrNoneWithEveryTensorInPlace) {
  const TrainSettings split = tiny_gpt("split_layers = [[1, 1], [2, 3]]\n");
  auto saved = trained(split, "", 3);
  ASSERT_NE(saved, nullptr);
  ASSERT_TRUE(saved->save_checkpoint(path("split.h5"), "{}").ok());
  const Stored want = stored(*saved);
  EXPECT_TRUE(want.tensors.count("blocks.1.attn.qkv.weight"));
  EXPECT_TRUE(want.tensors.count("blocks.2.attn.qkv.bias/exp_avg_sq"));

  for (const char* other : {"", "split_layers = [[2, 2]]\n", "split_layers = [[1, 3]]\n"}) {
    auto resumed = trained(tiny_gpt(other), path("split.h5"), 0);
    ASSERT_NE(resumed, nullptr) << other;
    EXPECT_EQ(resumed->steps_done(), 3) << other;
    const Stored got = stored(*resumed);
    EXPECT_EQ(got.tensors.size(), want.tensors.size()) << other;
    for (const auto& [name, tensor] : want.tensors) {
      ASSERT_TRUE(got.tensors.count(name)) << other << " " << name;
      EXPECT_EQ(got.tensors.at(name), tensor) << other << " " << name;
    }
    // And its own checkpoint is the same file's tensors again.
    ASSERT_TRUE(resumed->save_checkpoint(path("again.h5"), "{}").ok());
    auto reread = trained(split, path("again.h5"), 0);
    ASSERT_NE(reread, nullptr);
    EXPECT_EQ(stored(*reread).tensors, want.tensors) << other;
  }

  // Training on from there matches within rounding (the split computes the same sums in
  // other groupings).
  std::vector<double> same_split, unsplit;
  trained(split, path("split.h5"), 3, &same_split);
  trained(tiny_gpt(""), path("split.h5"), 3, &unsplit);
  ASSERT_EQ(unsplit.size(), 3u);
  for (std::size_t i = 0; i < unsplit.size(); ++i) {
    EXPECT_NEAR(unsplit[i], same_split[i], 1e-5 * same_split[i]) << "step " << i + 4;
  }
}

}  // namespace
}  // namespace spw
