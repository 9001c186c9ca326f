// A transformer layer split into a front (LN1 and its first heads) and a back computes what
// the unsplit layer computes: the same output, input gradient and parameter gradients (the
// qkv rows by head), and a model with split layers trains as the unsplit one does.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "op_test_support.hpp"
#include "runtime/gpt_blocks.hpp"
#include "runtime/gpt_split_layer.hpp"
#include "runtime/job_config.hpp"
#include "runtime/model.hpp"
#include "runtime/parameter_store.hpp"
#include "runtime/train_command.hpp"
#include "runtime/trainer.hpp"

namespace spw {
namespace {

constexpr std::uint64_t kSeed = 11;

GptShape small_shape() {
  GptShape shape;
  shape.layers = 4;
  shape.d_model = 32;
  shape.heads = 4;
  shape.seq = 8;
  return shape;
}

Tensor random_tensor(const Shape& shape, const char* stream) {
  auto t = Tensor::zeros(shape, MemoryCategory::workspace);
  EXPECT_TRUE(t.ok());
  fill_normal(*t, 1.0, kSeed, stream);
  return std::move(t).value();
}

std::vector<float> values(const Tensor& t) { return {t.data(), t.data() + t.numel()}; }

using testing::max_relative;

// Rows of a [3d, d] qkv weight (or [3d] bias, cols 1) that heads [first, first + count) use.
std::vector<float> qkv_rows(const Tensor& t, std::int64_t d, std::int64_t hd, std::int64_t first,
                            std::int64_t count, std::int64_t cols) {
  std::vector<float> rows;
  for (std::int64_t part = 0; part < 3; ++part) {
    const float* from = t.data() + (part * d + first * hd) * cols;
    rows.insert(rows.end(), from, from + count * hd * cols);
  }
  return rows;
}

struct Passes {
  std::vector<float> y, dx;
  std::map<std::string, std::vector<float>> values, grads;
};

// Forward, backward_input and backward_weight of `blocks` in a chain, on x and dy.
Passes run_chain(std::vector<std::unique_ptr<Block>>& blocks, const MicrobatchData& mb,
                 const Tensor& x, const Tensor& dy) {
  Passes out;
  std::vector<Tensor> acts{Tensor::borrow(const_cast<float*>(x.data()), x.shape())};
  std::vector<BlockState> states(blocks.size());
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_TRUE(blocks[i]->init_parameters(kSeed).ok());
    auto next = Tensor::zeros(blocks[i]->output_shape(mb), MemoryCategory::workspace);
    EXPECT_TRUE(next.ok());
    const Status status = blocks[i]->forward(mb, &acts[i], &*next, states[i], nullptr);
    EXPECT_TRUE(status.ok()) << status.message();
    acts.push_back(std::move(next).value());
  }
  out.y = values(acts.back());
  std::vector<Tensor> grads(blocks.size() + 1);
  grads.back() = Tensor::borrow(const_cast<float*>(dy.data()), dy.shape());
  for (std::size_t i = blocks.size(); i-- > 0;) {
    auto din = Tensor::zeros(acts[i].shape(), MemoryCategory::workspace);
    EXPECT_TRUE(din.ok());
    grads[i] = std::move(din).value();
    Status status = blocks[i]->backward_input(mb, &acts[i], &grads[i + 1], &grads[i], states[i]);
    EXPECT_TRUE(status.ok()) << status.message();
    status = blocks[i]->backward_weight(mb, &acts[i], &grads[i + 1], states[i]);
    EXPECT_TRUE(status.ok()) << status.message();
  }
  out.dx = values(grads.front());
  for (auto& block : blocks) {
    for (const NamedParameter& p : block->parameters()) {
      out.values[p.name] = values(*p.value);
      out.grads[p.name] = values(*p.grad);
    }
  }
  return out;
}

class SplitLayer : public ::testing::TestWithParam<int> {};

TEST_P(SplitLayer, ComputesWhatTheUnsplitLayerComputes) {
  const GptShape shape = small_shape();
  const std::int64_t k = GetParam(), d = shape.d_model, hd = d / shape.heads, layer = 2;
  MicrobatchData mb;
  mb.samples = 3;
  mb.seq = shape.seq;
  const Tensor x = random_tensor({mb.rows(), d}, "x");
  const Tensor dy = random_tensor({mb.rows(), d}, "dy");

  std::vector<std::unique_ptr<Block>> whole;
  whole.push_back(std::move(make_transformer_block(shape, layer)).value());
  std::vector<std::unique_ptr<Block>> split;
  split.push_back(std::move(make_transformer_front(shape, layer, k)).value());
  split.push_back(std::move(make_transformer_back(shape, layer, k)).value());
  EXPECT_EQ(split[0]->name(), "blocks.2.front");
  EXPECT_EQ(split[1]->name(), "blocks.2.back");
  EXPECT_EQ(split[0]->output_shape(mb), Shape({mb.rows() * (2 * d + k * hd)}));

  const Passes ref = run_chain(whole, mb, x, dy);
  const Passes got = run_chain(split, mb, x, dy);
  EXPECT_LT(max_relative(got.y, ref.y), 1e-5);
  EXPECT_LT(max_relative(got.dx, ref.dx), 1e-5);

  const std::string p = "blocks.2.";
  // The split's initial qkv rows are the unsplit layer's, from the same stream.
  const auto& qkv = ref.values.at(p + "attn.qkv.weight");
  auto as_tensor = [](const std::vector<float>& v, const Shape& s) {
    return Tensor::borrow(const_cast<float*>(v.data()), s);
  };
  EXPECT_EQ(got.values.at(p + "attn.qkv_front.weight"),
            qkv_rows(as_tensor(qkv, {3 * d, d}), d, hd, 0, k, d));
  EXPECT_EQ(got.values.at(p + "attn.qkv_back.weight"),
            qkv_rows(as_tensor(qkv, {3 * d, d}), d, hd, k, shape.heads - k, d));

  const Tensor dqkv = as_tensor(ref.grads.at(p + "attn.qkv.weight"), {3 * d, d});
  const Tensor dqkv_b = as_tensor(ref.grads.at(p + "attn.qkv.bias"), {3 * d});
  EXPECT_LT(max_relative(got.grads.at(p + "attn.qkv_front.weight"),
                         qkv_rows(dqkv, d, hd, 0, k, d)), 1e-5);
  EXPECT_LT(max_relative(got.grads.at(p + "attn.qkv_back.weight"),
                         qkv_rows(dqkv, d, hd, k, shape.heads - k, d)), 1e-5);
  EXPECT_LT(max_relative(got.grads.at(p + "attn.qkv_front.bias"),
                         qkv_rows(dqkv_b, d, hd, 0, k, 1)), 1e-5);
  EXPECT_LT(max_relative(got.grads.at(p + "attn.qkv_back.bias"),
                         qkv_rows(dqkv_b, d, hd, k, shape.heads - k, 1)), 1e-5);
  for (const char* name : {"ln1.weight", "ln1.bias", "attn.proj.weight", "attn.proj.bias",
                           "ln2.weight", "ln2.bias", "mlp.fc1.weight", "mlp.fc1.bias",
                           "mlp.fc2.weight", "mlp.fc2.bias"}) {
    ASSERT_TRUE(got.grads.count(p + name)) << name;
    EXPECT_EQ(got.values.at(p + name), ref.values.at(p + name)) << name;
    EXPECT_LT(max_relative(got.grads.at(p + name), ref.grads.at(p + name)), 1e-5) << name;
  }
  // Every parameter of the layer is in exactly one of the two blocks.
  std::size_t whole_count = 0, split_count = 0;
  for (const auto& [name, v] : ref.values) whole_count += v.size();
  for (const auto& [name, v] : got.values) split_count += v.size();
  EXPECT_EQ(split_count, whole_count);
}

INSTANTIATE_TEST_SUITE_P(FrontHeads, SplitLayer, ::testing::Values(1, 3));

TEST(SplitLayerBlocks, RefuseAFrontWithoutHeadsOrWithAllOfThem) {
  const GptShape shape = small_shape();
  for (std::int64_t k : {0, 4}) {
    auto front = make_transformer_front(shape, 1, k);
    ASSERT_FALSE(front.ok());
    EXPECT_EQ(front.status().message(),
              "layer 1 split after " + std::to_string(k) + " heads: its front needs 1 to 3 of "
              "its 4 heads");
  }
  auto back = make_transformer_back(shape, 4, 1);
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().message(),
            "layer 4 to split is not one of the model's 4 layers (0 .. 3)");
}

TEST(SplitLayerBlocks, RefuseAnActivationOfTheWrongSize) {
  const GptShape shape = small_shape();
  auto back = std::move(make_transformer_back(shape, 1, 1)).value();
  MicrobatchData mb;
  mb.samples = 1;
  mb.seq = shape.seq;
  const Tensor wrong = random_tensor({mb.rows(), shape.d_model}, "x");
  Tensor y = random_tensor({mb.rows(), shape.d_model}, "y");
  BlockState state;
  const Status status = back->forward(mb, &wrong, &y, state, nullptr);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message(),
            "blocks.1.back: input has 256 floats, expected 576 (x, LN1(x) and 8 columns of "
            "heads for 8 rows)");
}

TEST(SplitLayerModel, BlocksNamesAndDescriptionShowTheSplit) {
  ModelSpec spec;
  spec.gpt = small_shape();
  spec.splits = {{1, 2}, {3, 1}};
  EXPECT_EQ(spec.block_count(), 8);
  EXPECT_EQ(spec.block_names(),
            (std::vector<std::string>{"embedding", "blocks.0", "blocks.1.front", "blocks.1.back",
                                      "blocks.2", "blocks.3.front", "blocks.3.back", "head"}));
  EXPECT_EQ(spec.describe(),
            "gpt layers=4 d_model=32 heads=4 seq=8 vocab=256 split=1:2,3:1");
  MicrobatchData mb;
  mb.samples = 2;
  mb.seq = 8;
  EXPECT_EQ(spec.activation_shape(2, mb), Shape({16 * (64 + 16)}));
  EXPECT_EQ(spec.activation_shape(3, mb), Shape({16, 32}));
  auto model = Model::build(spec, 2, 3);
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_EQ((*model)->block(0).name(), "blocks.1.front");
  EXPECT_EQ((*model)->block(1).name(), "blocks.1.back");
}

// A block's kind leaves out its place: the unsplit layers are one kind, a split layer's
// halves are kinds by their heads, and mlp layers of the same widths are one kind unless
// one reads the input or computes the loss.
TEST(SplitLayerModel, BlockKindsTellApartOnlyBlocksBuiltDifferently) {
  ModelSpec spec;
  spec.gpt = small_shape();
  spec.splits = {{1, 2}, {3, 2}};
  std::vector<std::string> kinds;
  for (std::int64_t b = 0; b < spec.block_count(); ++b) kinds.push_back(spec.block_kind(b));
  EXPECT_EQ(kinds, (std::vector<std::string>{"embedding", "layer", "front:2", "back:2", "layer",
                                             "front:2", "back:2", "head"}));
  spec.splits = {{3, 1}};
  EXPECT_EQ(spec.block_kind(4), "front:1");
  EXPECT_EQ(spec.block_kind(5), "back:1");

  ModelSpec mlp;
  mlp.kind = "mlp";
  mlp.dims = {64, 64, 64, 64, 10};
  kinds.clear();
  for (std::int64_t b = 0; b < mlp.block_count(); ++b) kinds.push_back(mlp.block_kind(b));
  EXPECT_EQ(kinds, (std::vector<std::string>{"dense 64-64 input", "dense 64-64", "dense 64-64",
                                             "dense 64-10 loss"}));
  mlp.dims = {8, 10};
  EXPECT_EQ(mlp.block_kind(0), "dense 8-10 input loss");
}

TEST(SplitLayerModel, BuildRefusesAnUnknownLayerOrOneSplitTwice) {
  ModelSpec spec;
  spec.gpt = small_shape();
  spec.splits = {{4, 1}};
  auto model = Model::build(spec);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().message(),
            "layer 4 to split is not one of the model's 4 layers (0 .. 3)");
  // Such a spec still answers for the blocks it has: none past its end.
  EXPECT_EQ(spec.block_count(), 6);
  spec.splits = {{1, 1}, {1, 2}};
  model = Model::build(spec);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().message(), "layer 1 is split twice");
  EXPECT_EQ(spec.block_count(), 7);
  EXPECT_EQ(spec.block_names().size(), 7u);
}

TrainSettings tiny_gpt(const std::string& splits) {
  auto job = parse_job_string(
      "[model]\nkind = \"gpt\"\nlayers = 3\nd_model = 32\nheads = 4\nseq = 16\n" + splits +
          "[data]\nsource = \"synthetic\"\n"
          "[train]\nbatch = 8\nsteps = 6\nlr = 0.1\noptimizer = \"sgd\"\nmicrobatches = 2\n",
      "tiny.toml", {});
  EXPECT_TRUE(job.ok()) << job.status().message();
  auto settings = train_settings_from(*job);
  EXPECT_TRUE(settings.ok());
  return *settings;
}

struct Trained {
  std::vector<double> loss;
  std::map<std::string, std::vector<float>> weights;
};

Trained train(const TrainSettings& settings) {
  auto trainer = Trainer::create(settings);
  EXPECT_TRUE(trainer.ok()) << trainer.status().message();
  Trained out;
  for (int i = 0; i < 6; ++i) {
    StepResult step;
    EXPECT_TRUE((*trainer)->run_step(step).ok());
    out.loss.push_back(step.loss);
  }
  for (const auto& p : (*trainer)->model().parameters()) out.weights[p.name] = values(*p.value);
  return out;
}

TEST(SplitLayerModel, TrainsAsTheUnsplitModelDoes) {
  const Trained ref = train(tiny_gpt(""));
  const Trained got = train(tiny_gpt("split_layers = [[2, 1], [0, 3]]\n"));
  ASSERT_EQ(got.loss.size(), ref.loss.size());
  for (std::size_t i = 0; i < ref.loss.size(); ++i) {
    EXPECT_NEAR(got.loss[i], ref.loss[i], 1e-5 * ref.loss[i]) << "step " << i + 1;
  }
  // Every parameter the two models name alike ends where the unsplit one does, and the
  // steps moved them.
  const TrainSettings untrained = tiny_gpt("");
  auto fresh = Model::build(untrained.model);
  ASSERT_TRUE(fresh.ok());
  ASSERT_TRUE((*fresh)->init_parameters(untrained.seed).ok());
  std::size_t compared = 0;
  for (const auto& p : (*fresh)->parameters()) {
    if (!got.weights.count(p.name)) continue;
    EXPECT_LT(max_relative(got.weights.at(p.name), ref.weights.at(p.name)), 1e-5) << p.name;
    if (p.name.find("weight") != std::string::npos && p.name.find("ln") == std::string::npos) {
      EXPECT_NE(values(*p.value), ref.weights.at(p.name)) << p.name << " never moved";
    }
    ++compared;
  }
  EXPECT_EQ(compared, ref.weights.size() - 4);  // all but layers 0 and 2's qkv weight and bias
}

}  // namespace
}  // namespace spw
