// Pipeline checkpoints: a run saved at step 3, loaded into a new executor and run 3 more steps
// is bit-identical to 6 straight steps; the file is a single-rank checkpoint, so the trainer
// resumes from it and the pipeline resumes from the trainer's; a checkpoint of another model
// and an unwritable path fail alike on every rank, changing nothing and leaving no file; a
// layer split across the stage boundary resumes too, into the same split, another or none.
// Each configuration runs on the first P·R ranks of the world; rank 0 compares.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "pipeline_test_support.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/pipeline_checkpoint.hpp"
#include "runtime/pipeline_executor.hpp"
#include "runtime/trainer.hpp"

namespace spw {
namespace {

using Weights = std::map<std::string, std::vector<float>>;

// tiny_gpt (pipeline_test_support.hpp) for 6 steps. AdamW by default: its moments and step count
// (bias correction) are state a resume must restore exactly. SGD with momentum where
// replicas are compared with the trainer: replicas sum gradients in another order, and
// AdamW would amplify that rounding (see test_pipeline_math).
TrainSettings checkpoint_gpt(int global_microbatches, const std::string& optimizer = "adamw") {
  TrainSettings s = tiny_gpt(global_microbatches, optimizer);
  s.steps = 6;
  return s;
}

struct Layout {
  std::string schedule;
  int P = 1;
  int R = 1;
  int ranks() const { return P * R * (schedule == "pipefb" ? 2 : 1); }
  std::string describe() const {
    return schedule + " P=" + std::to_string(P) + " R=" + std::to_string(R);
  }
};

std::vector<Layout> layouts(const std::vector<std::string>& schedules) {
  std::vector<Layout> out;
  for (const std::string& schedule : schedules) {
    for (Layout l : {Layout{schedule, 1, 1}, Layout{schedule, 2, 1}, Layout{schedule, 2, 2}}) {
      if (l.ranks() <= world_size()) out.push_back(l);
    }
  }
  return out;
}

Result<std::unique_ptr<PipelineExecutor>> make_executor(const TrainSettings& train,
                                                        const Layout& l, MPI_Comm comm) {
  ParallelConfig parallel;
  parallel.stages.form = StagesSpec::Form::count;
  parallel.stages.count = l.P * (l.schedule == "interleaved" ? 2 : 1);
  parallel.chunks = l.schedule == "interleaved" ? 2 : 1;
  parallel.replicas = l.R;
  parallel.schedule = l.schedule == "gpipe"         ? ScheduleKind::gpipe
                      : l.schedule == "1f1b"        ? ScheduleKind::one_f_one_b
                      : l.schedule == "interleaved" ? ScheduleKind::interleaved
                                                    : ScheduleKind::zb_h1;
  if (l.schedule == "pipefb") {
    parallel.layout = spw::Layout::pipefb;
    parallel.schedule = ScheduleKind::one_f_one_b;
  }
  PipelineSettings settings;
  settings.train = train;
  SPW_ASSIGN_OR_RETURN(settings.layout,
                       make_pipeline_layout(parallel, train.model.block_count(), train.batch,
                                            train.microbatches, l.ranks()));
  return PipelineExecutor::create(settings, comm);
}

// The first `ranks` ranks of the world, or MPI_COMM_NULL on the others.
MPI_Comm first_ranks(int ranks) {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() < ranks ? 0 : MPI_UNDEFINED, world_rank(), &comm);
  return comm;
}

struct Outcome {
  Status status;
  std::vector<double> loss;
  Weights weights;  // replica 0's, on rank 0
  std::int64_t steps_done = 0;
};

Status run_steps(PipelineExecutor& executor, int steps, Outcome& out) {
  for (int i = 0; i < steps; ++i) {
    StepResult step;
    SPW_TRY(executor.run_step(step));
    out.loss.push_back(step.loss);
  }
  return Status::success();
}

Status finish(PipelineExecutor& executor, Outcome& out) {
  SPW_ASSIGN_OR_RETURN(out.weights, executor.gather_parameters(0));
  out.steps_done = executor.steps_done();
  return Status::success();
}

// Collective over the world. Optionally loads `load_from` first, runs `steps`, saves to
// `save_to` when set, runs `more` steps and gathers the weights.
Outcome pipeline(const TrainSettings& train, const Layout& l, const std::string& load_from,
                 int steps, const std::string& save_to = "", int more = 0) {
  Outcome out;
  MPI_Comm comm = first_ranks(l.ranks());
  if (comm == MPI_COMM_NULL) return out;
  auto executor = make_executor(train, l, comm);
  out.status = executor.status();
  if (out.status.ok() && !load_from.empty()) {
    out.status = load_pipeline_checkpoint(**executor, comm, load_from);
  }
  if (out.status.ok()) out.status = run_steps(**executor, steps, out);
  if (out.status.ok() && !save_to.empty()) {
    out.status = save_pipeline_checkpoint(**executor, comm, save_to, "{\"test\": true}");
  }
  if (out.status.ok()) out.status = run_steps(**executor, more, out);
  if (out.status.ok()) out.status = finish(**executor, out);
  MPI_Comm_free(&comm);
  return out;
}

// Rank 0's trainer: optionally resumed from `resume_from`, `steps` steps, then saved to
// `save_to` when set, then `more` steps.
Outcome trainer(TrainSettings settings, const std::string& resume_from, int steps,
                const std::string& save_to = "", int more = 0) {
  Outcome out;
  settings.resume_from = resume_from;
  auto t = Trainer::create(settings);
  out.status = t.status();
  for (int i = 0; out.status.ok() && i < steps + more; ++i) {
    if (i == steps && !save_to.empty()) out.status = (*t)->save_checkpoint(save_to, "{}");
    StepResult step;
    if (out.status.ok()) out.status = (*t)->run_step(step);
    out.loss.push_back(step.loss);
  }
  if (!out.status.ok()) return out;
  for (const auto& p : (*t)->model().parameters()) {
    out.weights[p.name].assign(p.value->data(), p.value->data() + p.value->numel());
  }
  out.steps_done = (*t)->steps_done();
  return out;
}

void expect_close(const Weights& got, const Weights& want, const std::string& where) {
  ASSERT_EQ(got.size(), want.size()) << where;
  for (const auto& [name, values] : want) {
    ASSERT_TRUE(got.count(name)) << where << ": " << name << " missing";
    ASSERT_EQ(got.at(name).size(), values.size()) << where << " " << name;
    EXPECT_LT(max_relative(got.at(name), values), 1e-5) << where << " " << name;
  }
}

// "" when bit-identical, else the tensors that differ: short enough to read in a failure.
std::string differences(const Weights& got, const Weights& want) {
  std::string text;
  for (const auto& [name, values] : want) {
    if (!got.count(name)) {
      text += " " + name + " (missing)";
    } else if (got.at(name) != values) {
      text += " " + name;
    }
  }
  if (got.size() != want.size()) text += " (" + std::to_string(got.size()) + " tensors)";
  return text;
}

// Every object in an HDF5 file by path: "group", or a dataset's shape.
std::map<std::string, std::string> objects_in(const std::string& file) {
  std::map<std::string, std::string> objects;
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return objects;
  H5Lvisit(
      f, H5_INDEX_NAME, H5_ITER_INC,
      [](hid_t group, const char* name, const H5L_info_t*, void* out) -> herr_t {
        const hid_t object = H5Oopen(group, name, H5P_DEFAULT);
        std::string what = "other";
        if (H5Iget_type(object) == H5I_GROUP) what = "group";
        if (H5Iget_type(object) == H5I_DATASET) {
          const hid_t space = H5Dget_space(object);
          hsize_t dims[8] = {};
          const int rank = H5Sget_simple_extent_dims(space, dims, nullptr);
          what = "[";
          for (int i = 0; i < rank; ++i) what += (i > 0 ? ", " : "") + std::to_string(dims[i]);
          what += "]";
          H5Sclose(space);
        }
        H5Oclose(object);
        (*static_cast<std::map<std::string, std::string>*>(out))[name] = what;
        return 0;
      },
      &objects);
  H5Fclose(f);
  return objects;
}

// Every rank's copy of `text` equals rank 0's.
bool same_on_every_rank(const std::string& text) {
  int length = static_cast<int>(text.size());
  MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string root = text;
  root.resize(static_cast<std::size_t>(length));
  MPI_Bcast(root.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD);
  int same = root == text ? 1 : 0;
  int all = 0;
  MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

bool exists_anywhere(bool here) {
  int mine = here ? 1 : 0;
  int any = 0;
  MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any == 1;
}

// A directory every rank shares, made by rank 0 and removed after each test.
class PipelineCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string dir;
    if (world_rank() == 0) {
      std::string pattern =
          (std::filesystem::temp_directory_path() / "spillway-pipeline-ckpt-XXXXXX").string();
      if (::mkdtemp(pattern.data()) != nullptr) dir = pattern;
    }
    int length = static_cast<int>(dir.size());
    MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD);
    dir.resize(static_cast<std::size_t>(length));
    MPI_Bcast(dir.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD);
    dir_ = dir;
    ASSERT_FALSE(dir_.empty()) << "cannot create a temporary directory";
  }
  void TearDown() override {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0 && !dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  // The directory's entries, for "no temporary left behind".
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) {
      names.push_back(e.path().filename().string());
    }
    return names;
  }

  std::string dir_;
};

TEST_F(PipelineCheckpoint, SaveLoadAndContinueIsBitIdentical) {
  for (const Layout& l : layouts({"gpipe", "1f1b", "interleaved", "zb-h1", "pipefb"})) {
    const TrainSettings settings = checkpoint_gpt(4 * l.R);
    const std::string file = path("resume-" + l.schedule + "-" + std::to_string(l.P) + "-" +
                                  std::to_string(l.R) + ".h5");
    const Outcome straight = pipeline(settings, l, "", 6);
    const Outcome first = pipeline(settings, l, "", 3, file);
    const Outcome resumed = pipeline(settings, l, file, 3);
    if (world_rank() != 0) continue;
    const std::string where = l.describe();
    ASSERT_TRUE(straight.status.ok()) << where << ": " << straight.status.message();
    ASSERT_TRUE(first.status.ok()) << where << ": " << first.status.message();
    ASSERT_TRUE(resumed.status.ok()) << where << ": " << resumed.status.message();
    EXPECT_EQ(resumed.steps_done, 6) << where;
    std::vector<double> both = first.loss;
    both.insert(both.end(), resumed.loss.begin(), resumed.loss.end());
    EXPECT_EQ(both, straight.loss) << where;
    EXPECT_EQ(differences(resumed.weights, straight.weights), "") << where;
    // The resumed run did train: its weights moved away from the checkpoint's.
    EXPECT_NE(differences(resumed.weights, first.weights), "") << where;
  }
  if (world_rank() == 0) {
    for (const std::string& e : entries()) EXPECT_EQ(e.find(".tmp."), std::string::npos) << e;
  }
}

TEST_F(PipelineCheckpoint, HasTheSingleRankLayout) {
  // Interleaved: each rank holds two stages that are not neighbours.
  const Layout l{"interleaved", 2, world_size() >= 4 ? 2 : 1};
  const TrainSettings settings = checkpoint_gpt(4 * l.R);
  const Outcome out = pipeline(settings, l, "", 3, path("pipeline.h5"));
  if (world_rank() != 0) return;
  ASSERT_TRUE(out.status.ok()) << out.status.message();
  const Outcome reference = trainer(settings, "", 3, path("trainer.h5"), 1);
  ASSERT_TRUE(reference.status.ok()) << reference.status.message();
  const auto objects = objects_in(path("pipeline.h5"));
  EXPECT_EQ(objects.at("tok_emb.weight"), "[256, 16]");
  EXPECT_EQ(objects.at("optimizer/blocks.5.mlp.fc1.weight/exp_avg_sq"), "[64, 16]");
  EXPECT_EQ(objects, objects_in(path("trainer.h5")));
  auto meta = read_checkpoint_meta(path("pipeline.h5"));
  ASSERT_TRUE(meta.ok()) << meta.status().message();
  EXPECT_EQ(meta->step, 3);
  EXPECT_EQ(meta->data_position, 3 * settings.batch);
  EXPECT_EQ(meta->config_json, "{\"test\": true}");
}

TEST_F(PipelineCheckpoint, TheTrainerResumesFromAPipelineCheckpoint) {
  for (const Layout& l : layouts({"1f1b", "zb-h1"})) {
    if (l.P == 1) continue;
    // One replica is the trainer's arithmetic exactly; two sum gradients in another order.
    const TrainSettings settings = checkpoint_gpt(4 * l.R, l.R == 1 ? "adamw" : "sgd");
    const std::string file = path("to-trainer-" + l.describe() + ".h5");
    const Outcome continued = pipeline(settings, l, "", 3, file, 3);
    if (world_rank() != 0) continue;
    const std::string where = l.describe();
    ASSERT_TRUE(continued.status.ok()) << where << ": " << continued.status.message();
    const Outcome resumed = trainer(settings, file, 3);
    ASSERT_TRUE(resumed.status.ok()) << where << ": " << resumed.status.message();
    EXPECT_EQ(resumed.steps_done, 6) << where;
    expect_close(resumed.weights, continued.weights, where);
    if (l.R == 1) {
      EXPECT_EQ(differences(resumed.weights, continued.weights), "") << where;
      EXPECT_EQ(resumed.loss, std::vector<double>(continued.loss.begin() + 3, continued.loss.end()))
          << where;
    }
  }
}

TEST_F(PipelineCheckpoint, APipelineResumesFromATrainerCheckpoint) {
  for (const Layout& l : layouts({"gpipe", "interleaved"})) {
    if (l.P == 1) continue;
    const TrainSettings settings = checkpoint_gpt(4 * l.R, l.R == 1 ? "adamw" : "sgd");
    const std::string file = path("from-trainer-" + l.describe() + ".h5");
    Outcome reference;
    if (world_rank() == 0) reference = trainer(settings, "", 3, file, 3);
    MPI_Barrier(MPI_COMM_WORLD);  // the file exists before any rank reads it
    const Outcome resumed = pipeline(settings, l, file, 3);
    if (world_rank() != 0) continue;
    const std::string where = l.describe();
    ASSERT_TRUE(reference.status.ok()) << where << ": " << reference.status.message();
    ASSERT_TRUE(resumed.status.ok()) << where << ": " << resumed.status.message();
    EXPECT_EQ(resumed.steps_done, 6) << where;
    expect_close(resumed.weights, reference.weights, where);
    if (l.R == 1) {
      EXPECT_EQ(differences(resumed.weights, reference.weights), "") << where;
      EXPECT_EQ(resumed.loss, std::vector<double>(reference.loss.begin() + 3, reference.loss.end()))
          << where;
    }
  }
}

// A model that does not fit the checkpoint: the error names the dataset, is the same on every
// rank (also on ranks whose own stages matched) and no rank's weights or step change.
void expect_refused(const TrainSettings& saved_settings, const TrainSettings& other,
                    const std::string& file, const std::string& wanted_text) {
  const Layout l{"1f1b", 2, world_size() >= 4 ? 2 : 1};
  const Outcome saved = pipeline(saved_settings, l, "", 1, file);
  MPI_Comm comm = first_ranks(l.P * l.R);
  std::string message;
  if (comm != MPI_COMM_NULL) {
    auto executor = make_executor(other, l, comm);
    EXPECT_TRUE(executor.ok()) << executor.status().message();
    if (executor.ok()) {  // agreed: true on every rank or on none
      auto before = (*executor)->gather_parameters(0);
      const Status status = load_pipeline_checkpoint(**executor, comm, file);
      auto after = (*executor)->gather_parameters(0);
      EXPECT_FALSE(status.ok());
      EXPECT_EQ((*executor)->steps_done(), 0);
      EXPECT_EQ((*executor)->optimizer().step_count(), 0);
      message = status.message();
      EXPECT_NE(message.find(wanted_text), std::string::npos) << message;
      EXPECT_TRUE(before.ok() && after.ok());
      if (before.ok() && after.ok()) {
        EXPECT_EQ(differences(*after, *before), "");
      }
    }
    MPI_Comm_free(&comm);
  }
  EXPECT_TRUE(same_on_every_rank(message)) << message;
  ASSERT_TRUE(saved.status.ok()) << saved.status.message();
}

TEST_F(PipelineCheckpoint, AnotherSequenceLengthNamesTheDatasetOnEveryRank) {
  // Only the first stage holds pos_emb: the other ranks load fine yet must fail alike.
  TrainSettings longer = checkpoint_gpt(4);
  longer.model.gpt.seq = 12;
  expect_refused(checkpoint_gpt(4), longer, path("seq8.h5"),
                 "rank 0: checkpoint " + path("seq8.h5") +
                     ": dataset 'pos_emb.weight' has shape [8, 16] but the model expects "
                     "[12, 16]");
}

TEST_F(PipelineCheckpoint, MissingLayersNameTheDatasetOnEveryRank) {
  // Eight layers where the checkpoint has six: the last stage lacks blocks.6 and blocks.7.
  TrainSettings deeper = checkpoint_gpt(4);
  deeper.model.gpt.layers = 8;
  expect_refused(checkpoint_gpt(4), deeper, path("six-layers.h5"),
                 "rank 1: checkpoint " + path("six-layers.h5") + " has no dataset 'blocks.6.");
}

// A split layer's qkv weight as the unsplit layer holds it: plane by plane (Q, K, V), the
// front's rows and then the back's.
std::vector<float> joined_qkv(const Weights& weights, int layer, std::size_t d) {
  const std::string p = "blocks." + std::to_string(layer) + ".attn.";
  const std::vector<float>& front = weights.at(p + "qkv_front.weight");
  const std::vector<float>& back = weights.at(p + "qkv_back.weight");
  std::vector<float> whole;
  for (std::size_t plane = 0; plane < 3; ++plane) {
    const std::size_t f = front.size() / 3, b = back.size() / 3;
    whole.insert(whole.end(), front.begin() + plane * f, front.begin() + (plane + 1) * f);
    whole.insert(whole.end(), back.begin() + plane * b, back.begin() + (plane + 1) * b);
  }
  EXPECT_EQ(whole.size(), 3 * d * d);
  return whole;
}

// Layer 2 split after its first head with the stage boundary between its two blocks
// (model.split_layers; blocks 0-3 | 4-8): each rank writes its part of the layer's qkv
// tensors into the unsplit layer's datasets, so the file is laid out as the unsplit model's;
// a resume with the same split is bit-identical, and the unsplit model or another split
// resumes from it with every tensor in place. With ZB-H1, and on 4 ranks also with replicas
// (replica 0 writes) and under PipeFB (the backward ranks write).
void expect_split_resumes_into_any_split(const Layout& l, const std::string& dir) {
  SCOPED_TRACE(l.describe());
  TrainSettings split = checkpoint_gpt(4 * l.R);
  split.model.splits = {{2, 1}};
  const std::string file = dir + "/split.h5";
  const Outcome straight = pipeline(split, l, "", 6);
  const Outcome first = pipeline(split, l, "", 3, file);
  const Outcome resumed = pipeline(split, l, file, 3);
  const Outcome unsplit_file = pipeline(checkpoint_gpt(4 * l.R), l, "", 0, dir + "/unsplit.h5");
  if (world_rank() == 0) {
    ASSERT_TRUE(straight.status.ok()) << straight.status.message();
    ASSERT_TRUE(first.status.ok()) << first.status.message();
    ASSERT_TRUE(resumed.status.ok()) << resumed.status.message();
    ASSERT_TRUE(unsplit_file.status.ok()) << unsplit_file.status.message();
    ASSERT_TRUE(straight.weights.count("blocks.2.attn.qkv_front.weight"));
    std::vector<double> both = first.loss;
    both.insert(both.end(), resumed.loss.begin(), resumed.loss.end());
    EXPECT_EQ(both, straight.loss);
    EXPECT_EQ(differences(resumed.weights, straight.weights), "");
    EXPECT_EQ(objects_in(file), objects_in(dir + "/unsplit.h5"));
  }
  const std::size_t d = static_cast<std::size_t>(split.model.gpt.d_model);
  TrainSettings unsplit = checkpoint_gpt(4 * l.R), elsewhere = checkpoint_gpt(4 * l.R);
  elsewhere.model.splits = {{4, 1}};
  for (const TrainSettings& other : {unsplit, elsewhere}) {
    const std::string which = other.model.splits.empty() ? "unsplit" : "layer 4 split";
    const Outcome loaded = pipeline(other, l, file, 0);
    const Outcome trained_on = pipeline(other, l, file, 3);
    if (world_rank() != 0) continue;
    ASSERT_TRUE(loaded.status.ok()) << which << ": " << loaded.status.message();
    ASSERT_TRUE(trained_on.status.ok()) << which << ": " << trained_on.status.message();
    EXPECT_EQ(loaded.steps_done, 3) << which;
    EXPECT_EQ(loaded.weights.at("blocks.2.attn.qkv.weight"), joined_qkv(first.weights, 2, d))
        << which;
    if (!other.model.splits.empty()) {
      EXPECT_EQ(joined_qkv(loaded.weights, 4, d), first.weights.at("blocks.4.attn.qkv.weight"));
    }
    std::size_t alike = 0;
    for (const auto& [name, values] : loaded.weights) {
      if (!first.weights.count(name)) continue;
      EXPECT_EQ(values, first.weights.at(name)) << which << " " << name;
      ++alike;
    }
    // All but the qkv weights and biases of the layers one of the two models splits: layer
    // 2's whole, and with layer 4 split its front's and back's.
    EXPECT_EQ(alike, loaded.weights.size() - (other.model.splits.empty() ? 2 : 6)) << which;
    // The same sums in other groupings: the same losses within rounding.
    ASSERT_EQ(trained_on.loss.size(), resumed.loss.size());
    for (std::size_t i = 0; i < resumed.loss.size(); ++i) {
      EXPECT_NEAR(trained_on.loss[i], resumed.loss[i], 1e-5 * resumed.loss[i])
          << which << " step " << i + 4;
    }
  }
}

TEST_F(PipelineCheckpoint, ALayerSplitAcrossTheBoundaryResumesIntoAnySplit) {
  for (const Layout& l : {Layout{"zb-h1", 2, 1}, Layout{"1f1b", 2, 2}, Layout{"pipefb", 2, 1}}) {
    if (l.ranks() > world_size()) continue;
    const std::string dir = path(l.schedule + "-r" + std::to_string(l.R));
    if (world_rank() == 0) std::filesystem::create_directories(dir);
    MPI_Barrier(MPI_COMM_WORLD);
    expect_split_resumes_into_any_split(l, dir);
  }
}

TEST_F(PipelineCheckpoint, AMissingDirectoryIsNamedOnEveryRankAndLeavesNoFile) {
  const Layout l{"1f1b", 2, world_size() >= 4 ? 2 : 1};
  const std::string file = path("missing/ckpt.h5");
  const Outcome out = pipeline(checkpoint_gpt(4 * l.R), l, "", 1, file);
  if (world_rank() < l.P * l.R) {
    EXPECT_FALSE(out.status.ok());
    EXPECT_EQ(out.status.code(), StatusCode::io_error);
    EXPECT_NE(out.status.message().find("writing checkpoint " + file), std::string::npos)
        << out.status.message();
  }
  EXPECT_TRUE(same_on_every_rank(out.status.message()));
  EXPECT_FALSE(exists_anywhere(std::filesystem::exists(file)));
  if (world_rank() == 0) {
    EXPECT_EQ(entries().size(), 0u);
  }
}

TEST_F(PipelineCheckpoint, AFailedRenameRemovesTheFilledTemporary) {
  // A non-empty directory in the way: every rank has written its tensors when the rename
  // fails, and the temporary must go.
  const Layout l{"1f1b", 2, world_size() >= 4 ? 2 : 1};
  const std::string file = path("taken");
  if (world_rank() == 0) {
    std::filesystem::create_directories(file + "/inside");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const Outcome out = pipeline(checkpoint_gpt(4 * l.R), l, "", 1, file);
  if (world_rank() < l.P * l.R) {
    EXPECT_FALSE(out.status.ok());
    EXPECT_NE(out.status.message().find("renaming " + file + ".tmp."), std::string::npos)
        << out.status.message();
  }
  EXPECT_TRUE(same_on_every_rank(out.status.message()));
  if (world_rank() == 0) {
    EXPECT_EQ(entries(), std::vector<std::string>{"taken"});
    EXPECT_TRUE(std::filesystem::is_directory(file + "/inside"));
  }
}

}  // namespace
}  // namespace spw
