// A checkpoint's record of its model against the job's (runtime/checkpoint_model.hpp).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/checkpoint_model.hpp"

namespace spw {
namespace {

constexpr const char* kGpt =
    "[model]\nkind = \"gpt\"\nlayers = 4\nd_model = 32\nheads = 2\nseq = 16\n"
    "[data]\nsource = \"synthetic\"\n[train]\nbatch = 8\nsteps = 3\n";
constexpr const char* kMlp =
    "[model]\nkind = \"mlp\"\ndims = [8, 16, 4]\n[data]\nsource = \"synthetic\"\n"
    "[train]\nbatch = 8\nsteps = 3\n";

JobConfig job(const char* text, const std::vector<std::string>& overrides = {}) {
  Result<JobConfig> parsed = parse_job_string(text, "job.toml", overrides);
  EXPECT_TRUE(parsed.ok()) << parsed.status().message();
  return parsed.ok() ? *parsed : JobConfig{};
}

// The meta a run of `written` leaves in its checkpoints.
CheckpointMeta written_by(const JobConfig& written) {
  CheckpointMeta meta;
  meta.step = 3;
  meta.config_json = to_json(written).dump();
  return meta;
}

TEST(CheckpointModel, TheSameModelPasses) {
  EXPECT_TRUE(check_checkpoint_model("c.h5", written_by(job(kGpt)), job(kGpt)).ok());
  EXPECT_TRUE(check_checkpoint_model("c.h5", written_by(job(kMlp)), job(kMlp)).ok());
}

TEST(CheckpointModel, KeysThatChangeOnlyHowItIsComputedPass) {
  // The split and the chunked head keep the parameters and the function (checkpoint.hpp), and
  // nothing outside [model] is compared.
  const JobConfig other = job(kGpt, {"model.split_layers=[[2, 1]]", "model.head_chunk_rows=64",
                                     "train.lr=0.5", "train.batch=4", "parallel.stages=2"});
  EXPECT_TRUE(check_checkpoint_model("c.h5", written_by(job(kGpt)), other).ok());
}

TEST(CheckpointModel, FewerLayersAreNamedWithTheFix) {
  const Status status =
      check_checkpoint_model("runs/c.h5", written_by(job(kGpt)), job(kGpt, {"model.layers=2"}));
  EXPECT_EQ(status.code(), StatusCode::shape_mismatch);
  EXPECT_EQ(status.message(),
            "checkpoint runs/c.h5 holds another model than the job's: model.layers = 4 there, 2 "
            "in the job: give the job the checkpoint's model (--set model.layers=4)");
}

TEST(CheckpointModel, EveryKeyThatShapesNoTensorIsNamed) {
  const Status status = check_checkpoint_model("c.h5", written_by(job(kGpt)),
                                               job(kGpt, {"model.heads=4", "model.ln_eps=1e-6"}));
  EXPECT_EQ(status.code(), StatusCode::shape_mismatch);
  EXPECT_NE(status.message().find("model.heads = 2 there, 4 in the job; model.ln_eps = 1e-05 "
                                  "there, 1e-06 in the job: give the job the checkpoint's model "
                                  "(--set model.heads=2 --set model.ln_eps=1e-05)"),
            std::string::npos)
      << status.message();
}

TEST(CheckpointModel, ShapesAreNamedByTheirKeys) {
  const Status width = check_checkpoint_model("c.h5", written_by(job(kGpt)),
                                              job(kGpt, {"model.vocab=300", "model.seq=8"}));
  EXPECT_NE(width.message().find("model.seq = 16 there, 8 in the job; model.vocab = 256 there, "
                                 "300 in the job"),
            std::string::npos)
      << width.message();
  const Status dims =
      check_checkpoint_model("c.h5", written_by(job(kMlp)), job(kMlp, {"model.dims=[8, 4]"}));
  EXPECT_NE(dims.message().find("model.dims = [8,16,4] there, [8,4] in the job: give the job "
                                "the checkpoint's model (--set model.dims=[8,16,4])"),
            std::string::npos)
      << dims.message();
}

TEST(CheckpointModel, AnotherKindIsNamedAloneWithAQuotedValue) {
  const Status status = check_checkpoint_model("c.h5", written_by(job(kMlp)), job(kGpt));
  EXPECT_EQ(status.message(),
            "checkpoint c.h5 holds another model than the job's: model.kind = mlp there, gpt in "
            "the job: give the job the checkpoint's model (--set 'model.kind=\"mlp\"')");
}

TEST(CheckpointModel, AFileThatRecordsNoModelPasses) {
  // Written by another program, or its record unreadable: the datasets' own checks remain.
  for (const char* recorded : {"", "not json", "[1, 2]", "{\"train\": {}}", "{\"model\": 3}"}) {
    CheckpointMeta meta;
    meta.config_json = recorded;
    EXPECT_TRUE(check_checkpoint_model("c.h5", meta, job(kGpt)).ok()) << recorded;
  }
  // A record from before a key existed compares the keys it has.
  CheckpointMeta older;
  older.config_json = R"({"model": {"kind": "gpt", "layers": 4, "d_model": 32}})";
  EXPECT_TRUE(check_checkpoint_model("c.h5", older, job(kGpt, {"model.heads=4"})).ok());
  EXPECT_FALSE(check_checkpoint_model("c.h5", older, job(kGpt, {"model.layers=3"})).ok());
}

TEST(CheckpointModel, ReadingTheMetaOfAMissingFileFailsAsBefore) {
  const Result<CheckpointMeta> meta = read_checkpoint_meta_for("/nonexistent/c.h5", job(kGpt));
  EXPECT_FALSE(meta.ok());
  EXPECT_NE(meta.status().message().find("/nonexistent/c.h5"), std::string::npos);
}

}  // namespace
}  // namespace spw
