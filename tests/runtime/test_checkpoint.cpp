// A checkpoint must resume a run exactly, be readable from Python as a state_dict, refuse a
// file that does not fit the model without touching it, and never be left half-written.
#include "runtime/checkpoint.hpp"

#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace spw {
namespace {

namespace fs = std::filesystem;

Tensor make_tensor(const Shape& shape, MemoryCategory category) {
  auto t = Tensor::zeros(shape, category);
  EXPECT_TRUE(t.ok()) << t.status().message();
  return std::move(t).value();
}

// Parameters with gradients, shaped as in a small GPT, filled from a seed.
struct Model {
  std::vector<std::string> names;
  std::vector<Tensor> values, grads;

  void add(const std::string& name, const Shape& shape) {
    names.push_back(name);
    values.push_back(make_tensor(shape, MemoryCategory::parameters));
    grads.push_back(make_tensor(shape, MemoryCategory::gradients));
  }
  void fill(std::uint64_t seed) {
    std::mt19937 rng(static_cast<std::uint32_t>(seed));
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (Tensor& t : values) {
      for (std::int64_t i = 0; i < t.numel(); ++i) t.data()[i] = dist(rng);
    }
  }
  void fill_grads(std::uint64_t seed) {
    std::mt19937 rng(static_cast<std::uint32_t>(seed));
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (Tensor& t : grads) {
      for (std::int64_t i = 0; i < t.numel(); ++i) t.data()[i] = dist(rng);
    }
  }
  std::vector<NamedParameter> params() {
    std::vector<NamedParameter> out;
    for (std::size_t i = 0; i < names.size(); ++i) out.push_back({names[i], &values[i], &grads[i]});
    return out;
  }
  std::vector<std::vector<float>> snapshot() const {
    std::vector<std::vector<float>> out;
    for (const Tensor& t : values) out.emplace_back(t.data(), t.data() + t.numel());
    return out;
  }
};

Model small_gpt() {
  Model m;
  m.add("tok_emb.weight", Shape{32, 8});
  m.add("blocks.0.ln1.weight", Shape{8});
  m.add("blocks.0.ln1.bias", Shape{8});
  m.add("blocks.0.attn.qkv.weight", Shape{24, 8});
  m.add("blocks.0.attn.qkv.bias", Shape{24});
  m.add("head.weight", Shape{32, 8});
  m.add("logit_scale", Shape{});  // a PyTorch scalar, shape ()
  return m;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

std::unique_ptr<Optimizer> make(const std::string& kind, std::vector<NamedParameter> params) {
  OptimizerSettings s;
  s.kind = kind;
  s.lr = 0.01;
  s.momentum = 0.9;
  s.weight_decay = 0.1;
  auto optimizer = make_optimizer(s, std::move(params));
  EXPECT_TRUE(optimizer.ok()) << optimizer.status().message();
  return std::move(optimizer).value();
}

class Checkpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("spw_checkpoint_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_, fs::perms::owner_all, ec);
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // Everything in the directory, to show that no temporary was left behind.
  std::set<std::string> entries() const {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.insert(e.path().filename().string());
    return out;
  }

  fs::path dir_;
};

// Trains two steps so the optimizer state is not trivially zero.
void train(Model& model, Optimizer& optimizer, int steps, std::uint64_t seed) {
  for (int i = 0; i < steps; ++i) {
    model.fill_grads(seed + static_cast<std::uint64_t>(i));
    ASSERT_TRUE(optimizer.step().ok());
  }
}

TEST_F(Checkpoint, RoundTripRestoresValuesStateStepAndMetaBitExactly) {
  for (const std::string kind : {"adamw", "sgd"}) {
    Model a = small_gpt();
    a.fill(1);
    // Bit patterns a float conversion would disturb.
    a.values[1].data()[0] = -0.0f;
    a.values[1].data()[1] = std::numeric_limits<float>::denorm_min();
    a.values[1].data()[2] = std::numeric_limits<float>::infinity();
    auto opt_a = make(kind, a.params());
    train(a, *opt_a, 2, 10);
    CheckpointMeta meta{2, 12345,
                        "{\"model\": \"gpt\", \"note\": \"\xc3\xa9t\xc3\xa9\", \"pad\": \"" +
                            std::string(100000, 'x') + "\"}"};
    const std::string file = path("ckpt_" + kind + ".h5");
    ASSERT_TRUE(save_checkpoint(file, a.params(), opt_a.get(), meta).ok());
    EXPECT_EQ(entries().count("ckpt_" + kind + ".h5"), 1u);
    for (const std::string& e : entries()) EXPECT_EQ(e.find(".tmp."), std::string::npos) << e;

    Model b = small_gpt();
    b.fill(2);
    auto opt_b = make(kind, b.params());
    CheckpointMeta loaded;
    const Status status = load_checkpoint(file, b.params(), opt_b.get(), loaded);
    ASSERT_TRUE(status.ok()) << status.message();
    for (std::size_t i = 0; i < a.values.size(); ++i) {
      EXPECT_TRUE(same_bits(a.values[i], b.values[i])) << a.names[i];
      for (std::size_t slot = 0; slot < opt_a->state_names().size(); ++slot) {
        EXPECT_TRUE(same_bits(opt_a->state(i, slot), opt_b->state(i, slot))) << a.names[i];
      }
    }
    EXPECT_EQ(opt_b->step_count(), 2);
    EXPECT_EQ(loaded.step, 2);
    EXPECT_EQ(loaded.data_position, 12345);
    EXPECT_EQ(loaded.config_json, meta.config_json);

    // The resumed run continues exactly as the original.
    train(a, *opt_a, 1, 50);
    train(b, *opt_b, 1, 50);
    for (std::size_t i = 0; i < a.values.size(); ++i) {
      EXPECT_TRUE(same_bits(a.values[i], b.values[i])) << kind << " " << a.names[i];
    }
  }
}

std::vector<hsize_t> dims_of(hid_t file, const std::string& name) {
  const hid_t dataset = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
  EXPECT_GE(dataset, 0) << name;
  const hid_t type = H5Dget_type(dataset);
  EXPECT_EQ(H5Tget_class(type), H5T_FLOAT) << name;
  EXPECT_EQ(H5Tget_size(type), 4u) << name;
  const hid_t space = H5Dget_space(dataset);
  std::vector<hsize_t> dims(static_cast<std::size_t>(H5Sget_simple_extent_ndims(space)));
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  H5Sclose(space);
  H5Tclose(type);
  H5Dclose(dataset);
  return dims;
}

herr_t collect_name(hid_t, const char* name, const H5L_info_t*, void* out) {
  static_cast<std::set<std::string>*>(out)->insert(name);
  return 0;
}

std::int64_t int_attribute(hid_t loc, const char* name) {
  std::int64_t value = -1;
  const hid_t attribute = H5Aopen(loc, name, H5P_DEFAULT);
  EXPECT_GE(H5Aread(attribute, H5T_NATIVE_INT64, &value), 0) << name;
  H5Aclose(attribute);
  return value;
}

TEST_F(Checkpoint, FileIsLaidOutLikeAPyTorchStateDict) {
  Model m = small_gpt();
  m.fill(3);
  auto optimizer = make("adamw", m.params());
  train(m, *optimizer, 3, 20);
  const std::string file = path("layout.h5");
  ASSERT_TRUE(save_checkpoint(file, m.params(), optimizer.get(), {3, 96, "{}"}).ok());

  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  std::set<std::string> root;
  H5Literate(f, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, collect_name, &root);
  std::set<std::string> expected(m.names.begin(), m.names.end());
  expected.insert({"optimizer", "meta"});
  EXPECT_EQ(root, expected);

  // Dotted keys are single datasets at the root, with PyTorch's shapes.
  EXPECT_EQ(dims_of(f, "tok_emb.weight"), (std::vector<hsize_t>{32, 8}));
  EXPECT_EQ(dims_of(f, "blocks.0.ln1.weight"), (std::vector<hsize_t>{8}));
  EXPECT_EQ(dims_of(f, "blocks.0.attn.qkv.weight"), (std::vector<hsize_t>{24, 8}));
  EXPECT_EQ(dims_of(f, "blocks.0.attn.qkv.bias"), (std::vector<hsize_t>{24}));
  EXPECT_EQ(dims_of(f, "logit_scale"), (std::vector<hsize_t>{}));
  EXPECT_EQ(H5Lexists(f, "blocks", H5P_DEFAULT), 0);
  EXPECT_EQ(dims_of(f, "/optimizer/head.weight/exp_avg"), (std::vector<hsize_t>{32, 8}));
  EXPECT_EQ(dims_of(f, "/optimizer/blocks.0.ln1.bias/exp_avg_sq"), (std::vector<hsize_t>{8}));

  std::vector<float> head(32 * 8);
  const hid_t dataset = H5Dopen2(f, "head.weight", H5P_DEFAULT);
  ASSERT_GE(H5Dread(dataset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, head.data()), 0);
  H5Dclose(dataset);
  EXPECT_EQ(std::memcmp(head.data(), m.values[5].data(), m.values[5].bytes()), 0);

  const hid_t opt = H5Gopen2(f, "optimizer", H5P_DEFAULT);
  EXPECT_EQ(int_attribute(opt, "step"), 3);
  H5Gclose(opt);
  const hid_t meta = H5Gopen2(f, "meta", H5P_DEFAULT);
  EXPECT_EQ(int_attribute(meta, "step"), 3);
  EXPECT_EQ(int_attribute(meta, "data_position"), 96);
  EXPECT_EQ(int_attribute(meta, "format_version"), 1);
  H5Gclose(meta);
  H5Fclose(f);
}

TEST_F(Checkpoint, LoadParametersNeedsOnlyTheValues) {
  Model a = small_gpt();
  a.fill(4);
  const std::string file = path("weights.h5");
  ASSERT_TRUE(save_checkpoint(file, a.params(), nullptr, {}).ok());
  Model b = small_gpt();
  ASSERT_TRUE(load_parameters(file, b.params()).ok());
  for (std::size_t i = 0; i < a.values.size(); ++i)
    EXPECT_TRUE(same_bits(a.values[i], b.values[i]));

  // A subset (one pipeline stage) loads from the whole-model file.
  Model stage;
  stage.add("head.weight", Shape{32, 8});
  ASSERT_TRUE(load_parameters(file, stage.params()).ok());
  EXPECT_TRUE(same_bits(stage.values[0], a.values[5]));

  // A full resume needs the optimizer state this file does not have.
  auto optimizer = make("adamw", b.params());
  CheckpointMeta meta;
  const Status status = load_checkpoint(file, b.params(), optimizer.get(), meta);
  EXPECT_EQ(status.code(), StatusCode::not_found);
  EXPECT_EQ(status.message(), "checkpoint " + file + " has no optimizer state (group 'optimizer')");
}

TEST_F(Checkpoint, MissingFileIsNotFound) {
  Model m = small_gpt();
  const std::string file = path("absent.h5");
  const Status status = load_parameters(file, m.params());
  EXPECT_EQ(status.code(), StatusCode::not_found);
  EXPECT_EQ(status.message(), "checkpoint " + file + " does not exist");
  CheckpointMeta meta;
  EXPECT_EQ(load_checkpoint(file, m.params(), nullptr, meta).code(), StatusCode::not_found);
}

TEST_F(Checkpoint, NotAnHdf5FileIsAnIoError) {
  const std::string file = path("text.h5");
  {
    std::FILE* f = std::fopen(file.c_str(), "w");
    std::fputs("not hdf5\n", f);
    std::fclose(f);
  }
  Model m = small_gpt();
  const Status status = load_parameters(file, m.params());
  EXPECT_EQ(status.code(), StatusCode::io_error);
  EXPECT_NE(status.message().find("cannot be opened as an HDF5 file"), std::string::npos)
      << status.message();
}

// The failing entry comes last, so a loader that wrote as it went would have changed the rest.
TEST_F(Checkpoint, MissingDatasetIsNamedAndNothingIsLoaded) {
  Model saved = small_gpt();
  saved.fill(5);
  const std::string file = path("x.h5");
  ASSERT_TRUE(save_checkpoint(file, saved.params(), nullptr, {}).ok());
  Model m = small_gpt();
  m.add("blocks.3.mlp.fc1.weight", Shape{32, 8});
  m.fill(6);
  const auto before = m.snapshot();
  const Status status = load_parameters(file, m.params());
  EXPECT_EQ(status.code(), StatusCode::not_found);
  EXPECT_EQ(status.message(), "checkpoint " + file + " has no dataset 'blocks.3.mlp.fc1.weight'");
  EXPECT_EQ(m.snapshot(), before);
}

TEST_F(Checkpoint, WrongShapeNamesBothShapesAndNothingIsLoaded) {
  Model saved;
  saved.add("blocks.0.ln1.weight", Shape{256});
  saved.add("head.weight", Shape{256, 128});
  saved.fill(7);
  auto saved_opt = make("adamw", saved.params());
  train(saved, *saved_opt, 1, 30);
  const std::string file = path("x.h5");
  ASSERT_TRUE(save_checkpoint(file, saved.params(), saved_opt.get(), {1, 2, "{}"}).ok());

  Model m;
  m.add("blocks.0.ln1.weight", Shape{256});
  m.add("head.weight", Shape{256, 256});
  m.fill(8);
  auto optimizer = make("adamw", m.params());
  train(m, *optimizer, 2, 40);
  const auto before = m.snapshot();
  const std::vector<float> state_before(optimizer->state(0, 0).data(),
                                        optimizer->state(0, 0).data() + 256);
  CheckpointMeta meta{7, 8, "mine"};
  const Status status = load_checkpoint(file, m.params(), optimizer.get(), meta);
  EXPECT_EQ(status.code(), StatusCode::shape_mismatch);
  EXPECT_EQ(status.message(), "checkpoint " + file +
                                  ": dataset 'head.weight' has shape [256, 128] but the model "
                                  "expects [256, 256]");
  EXPECT_EQ(m.snapshot(), before);
  EXPECT_EQ(std::vector<float>(optimizer->state(0, 0).data(), optimizer->state(0, 0).data() + 256),
            state_before);
  EXPECT_EQ(optimizer->step_count(), 2);
  EXPECT_EQ(meta.step, 7);
  EXPECT_EQ(meta.config_json, "mine");
  EXPECT_EQ(load_parameters(file, m.params()).code(), StatusCode::shape_mismatch);
  EXPECT_EQ(m.snapshot(), before);
}

TEST_F(Checkpoint, WrongDtypeIsRefused) {
  const std::string file = path("f64.h5");
  {
    const hid_t f = H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    const hsize_t dims[1] = {8};
    const hid_t space = H5Screate_simple(1, dims, nullptr);
    const hid_t d = H5Dcreate2(f, "blocks.0.ln1.weight", H5T_IEEE_F64LE, space, H5P_DEFAULT,
                               H5P_DEFAULT, H5P_DEFAULT);
    const std::vector<double> ones(8, 1.0);
    H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, ones.data());
    H5Dclose(d);
    H5Sclose(space);
    H5Fclose(f);
  }
  Model m;
  m.add("blocks.0.ln1.weight", Shape{8});
  const Status status = load_parameters(file, m.params());
  EXPECT_EQ(status.code(), StatusCode::invalid_argument);
  EXPECT_EQ(status.message(), "checkpoint " + file +
                                  ": dataset 'blocks.0.ln1.weight' has type float64 but the "
                                  "model expects float32");
  EXPECT_EQ(m.values[0].data()[0], 0.0f);
}

TEST_F(Checkpoint, OptimizerOfAnotherKindIsRefused) {
  Model m = small_gpt();
  auto sgd = make("sgd", m.params());
  const std::string file = path("sgd.h5");
  ASSERT_TRUE(save_checkpoint(file, m.params(), sgd.get(), {}).ok());
  auto adamw = make("adamw", m.params());
  CheckpointMeta meta;
  const Status status = load_checkpoint(file, m.params(), adamw.get(), meta);
  EXPECT_EQ(status.code(), StatusCode::invalid_argument);
  EXPECT_EQ(status.message(),
            "checkpoint " + file + " holds sgd optimizer state but the optimizer is adamw");
}

TEST_F(Checkpoint, NamesThatCannotBeDatasetsAreRefusedBeforeWriting) {
  Model m;
  m.add("a/b", Shape{2});
  const std::string file = path("bad.h5");
  EXPECT_EQ(save_checkpoint(file, m.params(), nullptr, {}).code(), StatusCode::invalid_argument);
  Model reserved;
  reserved.add("meta", Shape{2});
  EXPECT_EQ(save_checkpoint(file, reserved.params(), nullptr, {}).code(),
            StatusCode::invalid_argument);
  EXPECT_TRUE(entries().empty());
}

TEST_F(Checkpoint, EmptyTensorsRoundTrip) {
  Model a;
  a.add("empty.weight", Shape{0, 4});
  a.add("w", Shape{3});
  a.fill(9);
  const std::string file = path("empty.h5");
  ASSERT_TRUE(save_checkpoint(file, a.params(), nullptr, {}).ok());
  Model b;
  b.add("empty.weight", Shape{0, 4});
  b.add("w", Shape{3});
  ASSERT_TRUE(load_parameters(file, b.params()).ok());
  EXPECT_TRUE(same_bits(a.values[1], b.values[1]));
}

TEST_F(Checkpoint, SaveIntoAMissingDirectoryLeavesNothing) {
  Model m = small_gpt();
  const std::string file = path("no/such/dir/ckpt.h5");
  const Status status = save_checkpoint(file, m.params(), nullptr, {});
  EXPECT_EQ(status.code(), StatusCode::io_error);
  EXPECT_EQ(status.message().rfind("writing checkpoint " + file + ": ", 0), 0u) << status.message();
  EXPECT_TRUE(entries().empty());
}

TEST_F(Checkpoint, FailedRenameRemovesTheTemporary) {
  Model m = small_gpt();
  const std::string target = path("taken");
  fs::create_directories(fs::path(target) / "child");  // rename cannot replace a non-empty dir
  const Status status = save_checkpoint(target, m.params(), nullptr, {});
  EXPECT_EQ(status.code(), StatusCode::io_error);
  EXPECT_NE(status.message().find("renaming"), std::string::npos) << status.message();
  EXPECT_EQ(entries(), std::set<std::string>{"taken"});
}

// A disk that fills up halfway through a save: the temporary (named as checkpoint.hpp says)
// is made a link to /dev/full, where every write fails with ENOSPC. The previous checkpoint
// stays as it was, nothing is left beside it, and the process can save again.
TEST_F(Checkpoint, FullDiskKeepsTheOldCheckpointAndLeavesNoTemporary) {
  Model old_model;
  old_model.add("w", Shape{4});
  old_model.fill(10);
  const std::string file = path("ckpt.h5");
  ASSERT_TRUE(save_checkpoint(file, old_model.params(), nullptr, {1, 0, ""}).ok());

  Model big;
  big.add("w", Shape{1 << 20});
  big.fill(11);
  const std::string temporary = file + ".tmp." + std::to_string(::getpid());
  fs::create_symlink("/dev/full", temporary);
  const Status status = save_checkpoint(file, big.params(), nullptr, {2, 0, ""});
  EXPECT_EQ(status.code(), StatusCode::io_error);
  EXPECT_EQ(status.message(),
            "writing checkpoint " + file + ": writing " + temporary + ": No space left on device");
  EXPECT_EQ(entries(), std::set<std::string>{"ckpt.h5"});
  Model check;
  check.add("w", Shape{4});
  ASSERT_TRUE(load_parameters(file, check.params()).ok());
  EXPECT_TRUE(same_bits(check.values[0], old_model.values[0]));

  ASSERT_TRUE(save_checkpoint(file, big.params(), nullptr, {2, 0, ""}).ok());
  Model reloaded;
  reloaded.add("w", Shape{1 << 20});
  ASSERT_TRUE(load_parameters(file, reloaded.params()).ok());
  EXPECT_TRUE(same_bits(reloaded.values[0], big.values[0]));
}

TEST_F(Checkpoint, SaveIntoAnUnwritableDirectoryLeavesNothing) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into read-only directories";
  Model m = small_gpt();
  fs::permissions(dir_, fs::perms::owner_read | fs::perms::owner_exec);
  const Status status = save_checkpoint(path("ckpt.h5"), m.params(), nullptr, {});
  fs::permissions(dir_, fs::perms::owner_all);
  EXPECT_EQ(status.code(), StatusCode::io_error);
  EXPECT_TRUE(entries().empty());
}

}  // namespace
}  // namespace spw
