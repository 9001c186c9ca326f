// Job files are the user's whole interface to a run, so error messages are pinned exactly: each
// must name the file (or --set argument), the line and the key.
#include "runtime/job_config.hpp"

#include <gtest/gtest.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/train_command.hpp"

namespace spw {
namespace {

constexpr const char* kGptS = R"(# gpt-s: a small byte-level GPT on the fortunes corpus.
[model]
kind = "gpt"
layers = 8
d_model = 256
heads = 8
seq = 128

[data]
source = "text"

[train]
batch = 16
microbatches = 1
steps = 200
optimizer = "adamw"
lr = 1e-3
seed = 1234

[output]
dir = "runs/gpt-s"
)";

constexpr const char* kFashionMnist = R"([model]
kind = "mlp"
dims = [784, 1024, 1024, 1024, 10]

[data]
source = "fashion-mnist"

[train]
batch = 128
epochs = 3
optimizer = "sgd"
lr = 0.05
momentum = 0.9
seed = 1234

[output]
dir = "runs/fashion-mnist-mlp"
)";

// Every key set to something other than its default.
constexpr const char* kEverything = R"([model]
kind = "gpt"
layers = 4
d_model = 96
heads = 3
seq = 64
vocab = 256
ln_eps = 1e-6

[data]
source = "text"
path = "/srv/corpus"
holdout = 0.1

[train]
batch = 32
microbatches = 4
steps = 50
optimizer = "adamw"
lr = 3e-4
momentum = 0.5
beta1 = 0.8
beta2 = 0.95
eps = 1e-6
weight_decay = 0.1
seed = 7
init_from = "runs/a/ckpt-100.h5"
lr_decay = "cosine"
warmup_steps = 5
decay_steps = 40
min_lr = 3e-5
clip_grad_norm = 1.0

[eval]
every = 20
batches = 3

[parallel]
stages = [[0, 1], [2, 3], [4, 5]]
replicas = 2
schedule = "zb-h1"
chunks = 2
layout = "pipefb"

[offload]
tier = "file"
keep = 2
lookahead = 3
verify = true
dir = "/scratch/spill"
engine_pu = 3

[memory]
cap = "8GiB"

[output]
dir = "runs/everything"
checkpoint_every = 25
keep_best = true
trace = false

[threads]
count = 6
)";

Result<JobConfig> parse(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return parse_job_string(text, "job.toml", overrides);
}

// The message of a job that must fail with config_error.
std::string error_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
  Result<JobConfig> result = parse(text, overrides);
  if (result.ok()) return "<parsed without error>";
  EXPECT_EQ(result.status().code(), StatusCode::config_error) << result.status().message();
  return result.status().message();
}

// A job with the one required key, for checks that are about something else.
const std::string kTrain = "[train]\nsteps = 10\n";

TEST(JobConfigDefaults, MinimalJobHasDocumentedDefaults) {
  Result<JobConfig> result = parse(kTrain);
  ASSERT_TRUE(result.ok()) << result.status().message();
  const JobConfig& c = *result;
  EXPECT_EQ(c.model.kind, ModelKind::gpt);
  EXPECT_EQ(c.model.layers, 8);
  EXPECT_EQ(c.model.d_model, 256);
  EXPECT_EQ(c.model.heads, 8);
  EXPECT_EQ(c.model.seq, 128);
  EXPECT_EQ(c.model.vocab, 256);
  EXPECT_DOUBLE_EQ(c.model.ln_eps, 1e-5);
  EXPECT_TRUE(c.model.dims.empty());
  EXPECT_EQ(c.data.source, DataKind::text);
  EXPECT_EQ(c.data.path, "/usr/share/games/fortunes");
  EXPECT_EQ(c.train.batch, 16);
  EXPECT_EQ(c.train.microbatches, 1);
  EXPECT_EQ(c.train.steps, 10);
  EXPECT_FALSE(c.train.epochs.has_value());
  EXPECT_EQ(c.train.optimizer, OptimizerKind::adamw);
  EXPECT_DOUBLE_EQ(c.train.lr, 1e-3);
  EXPECT_DOUBLE_EQ(c.train.momentum, 0.0);
  EXPECT_DOUBLE_EQ(c.train.beta1, 0.9);
  EXPECT_DOUBLE_EQ(c.train.beta2, 0.999);
  EXPECT_DOUBLE_EQ(c.train.eps, 1e-8);
  EXPECT_DOUBLE_EQ(c.train.weight_decay, 0.0);
  EXPECT_EQ(c.train.seed, 1234u);
  EXPECT_EQ(c.train.init_from, "");
  EXPECT_EQ(c.train.lr_decay, LrDecay::constant);
  EXPECT_EQ(c.train.warmup_steps, 0);
  EXPECT_FALSE(c.train.decay_steps.has_value());
  EXPECT_DOUBLE_EQ(c.train.min_lr, 0.0);
  EXPECT_DOUBLE_EQ(c.train.clip_grad_norm, 0.0);
  EXPECT_DOUBLE_EQ(c.data.holdout, 0.0);
  EXPECT_EQ(c.eval.every, 0);
  EXPECT_EQ(c.eval.batches, 4);
  EXPECT_EQ(c.parallel.stages.form, StagesSpec::Form::automatic);
  EXPECT_EQ(c.parallel.replicas, 1);
  EXPECT_EQ(c.parallel.schedule, ScheduleKind::one_f_one_b);
  EXPECT_EQ(c.parallel.chunks, 1);
  EXPECT_EQ(c.parallel.layout, Layout::automatic);
  EXPECT_EQ(c.offload.tier, OffloadTier::none);
  EXPECT_EQ(c.offload.keep, 1);
  EXPECT_EQ(c.offload.lookahead, 1);
  EXPECT_FALSE(c.offload.verify);
  EXPECT_EQ(c.offload.dir, "");
  EXPECT_EQ(c.offload.engine_pu, kEnginePuAuto);
  EXPECT_FALSE(c.memory.cap.has_value());
  EXPECT_EQ(c.output.dir, "spillway-out");
  EXPECT_EQ(c.output.checkpoint_every, 0);
  EXPECT_FALSE(c.output.keep_best);
  EXPECT_TRUE(c.output.trace);
  EXPECT_EQ(c.threads.count, 0);
}

TEST(JobConfigDefaults, StructDefaultsMatchParsedDefaults) {
  JobConfig expected;
  expected.train.steps = 10;
  expected.data.path = "/usr/share/games/fortunes";
  Result<JobConfig> result = parse(kTrain);
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_TRUE(*result == expected);
}

TEST(JobConfigDefaults, DataPathFollowsSource) {
  Result<JobConfig> mnist = parse(kTrain + "[data]\nsource = \"fashion-mnist\"\n");
  ASSERT_TRUE(mnist.ok()) << mnist.status().message();
  EXPECT_EQ(mnist->data.path, "/usr/share/datasets/fashion-mnist");
  Result<JobConfig> synthetic = parse(kTrain + "[data]\nsource = \"synthetic\"\n");
  ASSERT_TRUE(synthetic.ok()) << synthetic.status().message();
  EXPECT_EQ(synthetic->data.source, DataKind::synthetic);
  EXPECT_EQ(synthetic->data.path, "");
  Result<JobConfig> given = parse(kTrain + "[data]\npath = \"/srv/text\"\n");
  ASSERT_TRUE(given.ok()) << given.status().message();
  EXPECT_EQ(given->data.path, "/srv/text");
}

TEST(JobConfigExamples, GptS) {
  Result<JobConfig> result = parse(kGptS);
  ASSERT_TRUE(result.ok()) << result.status().message();
  const JobConfig& c = *result;
  EXPECT_EQ(c.model.kind, ModelKind::gpt);
  EXPECT_EQ(c.model.layers, 8);
  EXPECT_EQ(c.model.d_model, 256);
  EXPECT_EQ(c.model.heads, 8);
  EXPECT_EQ(c.model.seq, 128);
  EXPECT_EQ(c.data.source, DataKind::text);
  EXPECT_EQ(c.train.batch, 16);
  EXPECT_EQ(c.train.steps, 200);
  EXPECT_EQ(c.train.optimizer, OptimizerKind::adamw);
  EXPECT_DOUBLE_EQ(c.train.lr, 1e-3);
  EXPECT_EQ(c.output.dir, "runs/gpt-s");
}

TEST(JobConfigExamples, FashionMnistMlp) {
  Result<JobConfig> result = parse(kFashionMnist);
  ASSERT_TRUE(result.ok()) << result.status().message();
  const JobConfig& c = *result;
  EXPECT_EQ(c.model.kind, ModelKind::mlp);
  EXPECT_EQ(c.model.dims, (std::vector<int>{784, 1024, 1024, 1024, 10}));
  EXPECT_EQ(c.data.source, DataKind::fashion_mnist);
  EXPECT_EQ(c.data.path, "/usr/share/datasets/fashion-mnist");
  EXPECT_EQ(c.train.batch, 128);
  EXPECT_EQ(c.train.epochs, 3);
  EXPECT_FALSE(c.train.steps.has_value());
  EXPECT_EQ(c.train.optimizer, OptimizerKind::sgd);
  EXPECT_DOUBLE_EQ(c.train.lr, 0.05);
  EXPECT_DOUBLE_EQ(c.train.momentum, 0.9);
}

TEST(JobConfigExamples, EveryKey) {
  Result<JobConfig> result = parse(kEverything);
  ASSERT_TRUE(result.ok()) << result.status().message();
  const JobConfig& c = *result;
  EXPECT_EQ(c.model.layers, 4);
  EXPECT_EQ(c.model.d_model, 96);
  EXPECT_EQ(c.model.heads, 3);
  EXPECT_EQ(c.model.seq, 64);
  EXPECT_DOUBLE_EQ(c.model.ln_eps, 1e-6);
  EXPECT_EQ(c.data.path, "/srv/corpus");
  EXPECT_EQ(c.train.batch, 32);
  EXPECT_EQ(c.train.microbatches, 4);
  EXPECT_EQ(c.train.steps, 50);
  EXPECT_DOUBLE_EQ(c.train.lr, 3e-4);
  EXPECT_DOUBLE_EQ(c.train.momentum, 0.5);
  EXPECT_DOUBLE_EQ(c.train.beta1, 0.8);
  EXPECT_DOUBLE_EQ(c.train.beta2, 0.95);
  EXPECT_DOUBLE_EQ(c.train.eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.train.weight_decay, 0.1);
  EXPECT_EQ(c.train.seed, 7u);
  EXPECT_EQ(c.train.init_from, "runs/a/ckpt-100.h5");
  EXPECT_EQ(c.train.lr_decay, LrDecay::cosine);
  EXPECT_EQ(c.train.warmup_steps, 5);
  EXPECT_EQ(c.train.decay_steps, 40);
  EXPECT_DOUBLE_EQ(c.train.min_lr, 3e-5);
  EXPECT_DOUBLE_EQ(c.train.clip_grad_norm, 1.0);
  EXPECT_DOUBLE_EQ(c.data.holdout, 0.1);
  EXPECT_EQ(c.eval.every, 20);
  EXPECT_EQ(c.eval.batches, 3);
  EXPECT_EQ(c.parallel.stages.form, StagesSpec::Form::ranges);
  EXPECT_EQ(c.parallel.stages.ranges,
            (std::vector<StageRange>{{0, 1}, {2, 3}, {4, 5}}));
  EXPECT_EQ(c.parallel.replicas, 2);
  EXPECT_EQ(c.parallel.schedule, ScheduleKind::zb_h1);
  EXPECT_EQ(c.parallel.chunks, 2);
  EXPECT_EQ(c.parallel.layout, Layout::pipefb);
  EXPECT_EQ(c.offload.tier, OffloadTier::file);
  EXPECT_EQ(c.offload.keep, 2);
  EXPECT_EQ(c.offload.lookahead, 3);
  EXPECT_TRUE(c.offload.verify);
  EXPECT_EQ(c.offload.dir, "/scratch/spill");
  EXPECT_EQ(c.offload.engine_pu, 3);
  EXPECT_EQ(c.memory.cap, std::size_t{8} << 30);
  EXPECT_EQ(c.output.dir, "runs/everything");
  EXPECT_EQ(c.output.checkpoint_every, 25);
  EXPECT_TRUE(c.output.keep_best);
  EXPECT_FALSE(c.output.trace);
  EXPECT_EQ(c.threads.count, 6);
}

TEST(JobConfigExamples, StagesAsCountAndMemoryCapAsInteger) {
  Result<JobConfig> result = parse(kTrain + "[parallel]\nstages = 4\n[memory]\ncap = 4096\n");
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_EQ(result->parallel.stages.form, StagesSpec::Form::count);
  EXPECT_EQ(result->parallel.stages.count, 4);
  EXPECT_EQ(result->memory.cap, 4096u);
}

TEST(JobConfigExamples, IntegerWhereNumberIsMeant) {
  Result<JobConfig> result = parse("[train]\nsteps = 1\nlr = 1\nweight_decay = 0\n");
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_DOUBLE_EQ(result->train.lr, 1.0);
}

// The shipped examples must stay valid job files.
TEST(JobConfigExamples, RepositoryExamplesLoad) {
  const std::filesystem::path examples =
      std::filesystem::path(__FILE__).parent_path() / ".." / ".." / "examples";
  if (!std::filesystem::is_directory(examples)) GTEST_SKIP() << "no examples/ at " << examples;
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(examples)) {
    if (entry.path().extension() != ".toml") continue;
    Result<JobConfig> result = load_job_file(entry.path().string(), {});
    EXPECT_TRUE(result.ok()) << result.status().message();
    ++count;
  }
  EXPECT_GT(count, 0);
}

TEST(JobConfigUnknownKeys, KeyWithSuggestion) {
  EXPECT_EQ(error_of("[train]\nsteps = 1\nlrr = 0.1\n"),
            "job.toml:3: unknown key 'train.lrr' (did you mean 'train.lr'?)");
  EXPECT_EQ(error_of("[train]\nsteps = 1\nmicrobatch = 2\n"),
            "job.toml:3: unknown key 'train.microbatch' (did you mean 'train.microbatches'?)");
}

TEST(JobConfigUnknownKeys, KeyWithoutSuggestion) {
  EXPECT_EQ(error_of("[train]\nsteps = 1\nbanana = 1\n"), "job.toml:3: unknown key 'train.banana'");
}

TEST(JobConfigUnknownKeys, KeyInWrongSection) {
  EXPECT_EQ(error_of(kTrain + "[model]\nbatch = 4\n"),
            "job.toml:4: unknown key 'model.batch' (did you mean 'train.batch'?)");
}

TEST(JobConfigUnknownKeys, Section) {
  EXPECT_EQ(error_of("[trian]\nsteps = 1\n"),
            "job.toml:1: unknown section 'trian' (did you mean 'train'?)");
  EXPECT_EQ(error_of(kTrain + "[cluster]\nnodes = 4\n"), "job.toml:3: unknown section 'cluster'");
}

TEST(JobConfigUnknownKeys, KeyOutsideSection) {
  EXPECT_EQ(error_of("lr = 0.1\n" + kTrain),
            "job.toml:1: unknown key 'lr', outside any section (did you mean 'train.lr'?)");
}

TEST(JobConfigUnknownKeys, SectionThatIsNotATable) {
  EXPECT_EQ(error_of("train = 5\n"), "job.toml:1: 'train' must be a table, got integer");
}

TEST(JobConfigUnknownKeys, EarliestLineIsReported) {
  EXPECT_EQ(error_of("[train]\nsteps = 1\nzzz = 1\n[model]\naaa = 2\n"),
            "job.toml:3: unknown key 'train.zzz'");
}

TEST(JobConfigTypes, WrongTypes) {
  EXPECT_EQ(error_of("[model]\nlayers = \"eight\"\n" + kTrain),
            "job.toml:2: 'model.layers' must be an integer, got string");
  EXPECT_EQ(error_of("[model]\nlayers = 8.0\n" + kTrain),
            "job.toml:2: 'model.layers' must be an integer, got float");
  EXPECT_EQ(error_of("[train]\nsteps = 1\nlr = \"fast\"\n"),
            "job.toml:3: 'train.lr' must be a number, got string");
  EXPECT_EQ(error_of(kTrain + "[output]\ntrace = 1\n"),
            "job.toml:4: 'output.trace' must be true or false, got integer");
  EXPECT_EQ(error_of(kTrain + "[data]\npath = 5\n"),
            "job.toml:4: 'data.path' must be a string, got integer");
  EXPECT_EQ(error_of(kTrain + "[data]\npath = [1]\n"),
            "job.toml:4: 'data.path' must be a string, got array");
  EXPECT_EQ(error_of(kTrain + "[output]\ndir = 1979-05-27\n"),
            "job.toml:4: 'output.dir' must be a string, got date");
  EXPECT_EQ(error_of("[model]\nkind = \"mlp\"\ndims = 5\n" + kTrain),
            "job.toml:3: 'model.dims' must be an array of integers, got integer");
  EXPECT_EQ(error_of(kTrain + "[memory]\ncap = 1.5\n"),
            "job.toml:4: 'memory.cap' must be a byte count (an integer or a string like \"8GiB\"), "
            "got float");
}

TEST(JobConfigTypes, ArrayElementsNameTheirOwnLine) {
  EXPECT_EQ(error_of("[model]\nkind = \"mlp\"\ndims = [\n  784,\n  \"wide\",\n  10,\n]\n" + kTrain),
            "job.toml:5: 'model.dims[1]' must be an integer, got string");
}

TEST(JobConfigTypes, IntegerTooLargeForField) {
  EXPECT_EQ(error_of("[model]\nlayers = 3000000000\n" + kTrain),
            "job.toml:2: 'model.layers' must be at most 2147483647, got 3000000000");
}

TEST(JobConfigEnums, ListAllowedValues) {
  EXPECT_EQ(error_of("[model]\nkind = \"cnn\"\n" + kTrain),
            "job.toml:2: 'model.kind' must be one of \"gpt\" or \"mlp\", got \"cnn\"");
  EXPECT_EQ(error_of(kTrain + "[parallel]\nschedule = \"pipedream\"\n"),
            "job.toml:4: 'parallel.schedule' must be one of \"gpipe\", \"1f1b\", \"interleaved\" "
            "or \"zb-h1\", got \"pipedream\"");
  EXPECT_EQ(error_of(kTrain + "[data]\nsource = 3\n"),
            "job.toml:4: 'data.source' must be one of \"text\", \"tokens\", \"fashion-mnist\" "
            "or \"synthetic\", got integer");
  EXPECT_EQ(error_of("[train]\nsteps = 1\noptimizer = \"adam\"\n"),
            "job.toml:3: 'train.optimizer' must be one of \"sgd\" or \"adamw\", got \"adam\"");
  EXPECT_EQ(error_of("[train]\nsteps = 1\nlr_decay = \"step\"\n"),
            "job.toml:3: 'train.lr_decay' must be one of \"constant\", \"cosine\" or \"linear\", "
            "got \"step\"");
  EXPECT_EQ(error_of(kTrain + "[parallel]\nlayout = \"fancy\"\n"),
            "job.toml:4: 'parallel.layout' must be one of \"auto\", \"classic\" or \"pipefb\", "
            "got \"fancy\"");
  EXPECT_EQ(error_of(kTrain + "[offload]\ntier = \"disk\"\n"),
            "job.toml:4: 'offload.tier' must be one of \"none\", \"host\", \"file\", \"peer\" "
            "or \"auto\", got \"disk\"");
}

TEST(JobConfigOffload, AutoTierIsThePlannersToChooseAndIsReportedAsAuto) {
  Result<JobConfig> job = parse(kGptS, {"offload.tier=auto", "memory.cap=1GiB"});
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(job->offload.tier, OffloadTier::automatic);
  EXPECT_EQ(to_string(OffloadTier::automatic), "auto");
  // report.json's config section carries the job as written: "auto", not the plan's tier.
  EXPECT_EQ(to_json(*job)["offload"]["tier"], "auto");
  // And a report's config reads back as the same job.
  Result<JobConfig> reread = parse_job_string(
      "[offload]\ntier = \"auto\"\n[train]\nsteps = 1\n", "report.toml", {});
  ASSERT_TRUE(reread.ok()) << reread.status().message();
  EXPECT_EQ(reread->offload.tier, OffloadTier::automatic);
}

TEST(JobConfigOffload, EnginePuIsAutoNoneOrAPuIndex) {
  Result<JobConfig> none = parse(kGptS, {"offload.engine_pu=none"});
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_EQ(none->offload.engine_pu, kEnginePuNone);
  EXPECT_EQ(to_json(*none)["offload"]["engine_pu"], "none");
  Result<JobConfig> automatic = parse(kGptS, {"offload.engine_pu=auto"});
  ASSERT_TRUE(automatic.ok()) << automatic.status().message();
  EXPECT_EQ(automatic->offload.engine_pu, kEnginePuAuto);
  EXPECT_EQ(to_json(*automatic)["offload"]["engine_pu"], "auto");
  Result<JobConfig> pu = parse(kGptS, {"offload.engine_pu=0"});
  ASSERT_TRUE(pu.ok()) << pu.status().message();
  EXPECT_EQ(pu->offload.engine_pu, 0);
  EXPECT_EQ(to_json(*pu)["offload"]["engine_pu"], 0);

  EXPECT_EQ(error_of(kTrain + "[offload]\nengine_pu = \"spare\"\n"),
            "job.toml:4: 'offload.engine_pu' must be \"auto\", \"none\" or a PU's OS index "
            "(an integer), got \"spare\"");
  EXPECT_EQ(error_of(kTrain + "[offload]\nengine_pu = 1.5\n"),
            "job.toml:4: 'offload.engine_pu' must be \"auto\", \"none\" or a PU's OS index "
            "(an integer), got float");
  EXPECT_EQ(error_of(kTrain + "[offload]\nengine_pu = -1\n"),
            "job.toml:4: 'offload.engine_pu' must be at least 0, got -1");
  EXPECT_EQ(error_of(kTrain, {"offload.engine_pu=off"}),
            "--set offload.engine_pu=off: 'offload.engine_pu' must be \"auto\", \"none\" or a "
            "PU's OS index (an integer), got \"off\"");
}

TEST(JobConfigOffload, AutoTierNeedsPlannedStages) {
  EXPECT_EQ(error_of(kTrain + "[parallel]\nstages = 2\n[offload]\ntier = \"auto\"\n"),
            "job.toml:6: offload.tier = \"auto\" lets the planner choose the offload, which "
            "needs parallel.stages = \"auto\": set parallel.stages = \"auto\" or choose a tier "
            "(\"none\", \"file\", \"peer\" or \"host\")");
  // A --set that makes the clash takes the blame.
  EXPECT_EQ(error_of(std::string(kGptS) + "[offload]\ntier = \"auto\"\n", {"parallel.stages=2"}),
            "--set parallel.stages=2: offload.tier = \"auto\" lets the planner choose the "
            "offload, which needs parallel.stages = \"auto\": set parallel.stages = \"auto\" "
            "or choose a tier (\"none\", \"file\", \"peer\" or \"host\")");
}

TEST(JobConfigRanges, Model) {
  EXPECT_EQ(error_of("[model]\nlayers = 0\n" + kTrain),
            "job.toml:2: 'model.layers' must be at least 1, got 0");
  EXPECT_EQ(error_of("[model]\nd_model = 250\nheads = 8\n" + kTrain),
            "job.toml:2: 'model.d_model' (250) must be divisible by 'model.heads' (8)");
  // Only heads is written, so the clash is blamed on it rather than on the default d_model.
  EXPECT_EQ(error_of("[model]\nseq = 64\nheads = 7\n" + kTrain),
            "job.toml:3: 'model.d_model' (256) must be divisible by 'model.heads' (7)");
  EXPECT_EQ(error_of("[model]\nvocab = 512\n" + kTrain),
            "job.toml:2: data.source = \"text\" gives a token a byte, so 'model.vocab' must be "
            "256, got 512: tokenize the corpus into a token file (data.source = \"tokens\") for "
            "another vocabulary");
  EXPECT_EQ(error_of("[model]\nvocab = 0\n" + kTrain),
            "job.toml:2: 'model.vocab' must be at least 1, got 0");
  EXPECT_EQ(error_of("[model]\nln_eps = 0.0\n" + kTrain),
            "job.toml:2: 'model.ln_eps' must be greater than 0, got 0");
}

TEST(JobConfigRanges, SplitLayers) {
  const std::string m = "[model]\nlayers = 4\nheads = 4\nd_model = 64\n";
  EXPECT_EQ(error_of(m + "split_layers = 2\n" + kTrain),
            "job.toml:5: 'model.split_layers' must be an array of [layer, heads] pairs or "
            "\"auto\", got integer");
  EXPECT_EQ(error_of(m + "split_layers = \"all\"\n" + kTrain),
            "job.toml:5: 'model.split_layers' must be an array of [layer, heads] pairs or "
            "\"auto\", got \"all\"");
  EXPECT_EQ(error_of(m + "split_layers = [[1, 2, 3]]\n" + kTrain),
            "job.toml:5: 'model.split_layers[0]' must be a [layer, heads] pair, got 3 entries");
  EXPECT_EQ(error_of(m + "split_layers = [[4, 1]]\n" + kTrain),
            "job.toml:5: 'model.split_layers[0]' names layer 4, but the model has layers 0 .. 3");
  EXPECT_EQ(error_of(m + "split_layers = [[1, 0]]\n" + kTrain),
            "job.toml:5: 'model.split_layers[0][1]' must be at least 1, got 0");
  EXPECT_EQ(error_of(m + "split_layers = [[1, 4]]\n" + kTrain),
            "job.toml:5: 'model.split_layers[0]' keeps 4 heads in the front, which leaves none "
            "of the layer's 4 for the back: use 1 .. 3");
  EXPECT_EQ(error_of(m + "split_layers = [[1, 1], [1, 2]]\n" + kTrain),
            "job.toml:5: 'model.split_layers[1]' splits layer 1 a second time");
  EXPECT_EQ(error_of("[model]\nkind = \"mlp\"\ndims = [4, 2]\nsplit_layers = [[0, 1]]\n" +
                     kTrain),
            "job.toml:4: 'model.split_layers' applies only to model.kind = \"gpt\"");
  // Read in layer order, whatever order the job lists them in.
  Result<JobConfig> job = parse(m + "split_layers = [[3, 1], [0, 2]]\n" + kTrain);
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(job->model.split_layers, (std::vector<std::array<int, 2>>{{0, 2}, {3, 1}}));
}

TEST(JobConfigRanges, SplitLayersAutoIsThePlannersAndNeedsPlannedStages) {
  const std::string m = "[model]\nlayers = 4\nheads = 4\nd_model = 64\n";
  Result<JobConfig> job =
      parse(m + "split_layers = \"auto\"\n" + kTrain + "[parallel]\nstages = \"auto\"\n");
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_TRUE(job->model.split_layers_auto);
  EXPECT_TRUE(job->model.split_layers.empty());
  auto settings = train_settings_from(*job);
  ASSERT_TRUE(settings.ok());
  EXPECT_TRUE(settings->split_layers_auto);
  EXPECT_TRUE(settings->model.splits.empty());  // the plan decides
  EXPECT_EQ(error_of(m + "split_layers = \"auto\"\n" + kTrain + "[parallel]\nstages = 2\n"),
            "job.toml:5: model.split_layers = \"auto\" lets the planner cut layers at the stage "
            "boundaries it chooses, which needs parallel.stages = \"auto\": set "
            "parallel.stages = \"auto\" or list the [layer, heads] pairs to split");
}

TEST(JobConfigRanges, HeadChunkRows) {
  Result<JobConfig> job = parse("[model]\nhead_chunk_rows = 256\n" + kTrain);
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(job->model.head_chunk_rows, 256);
  auto settings = train_settings_from(*job);
  ASSERT_TRUE(settings.ok());
  EXPECT_EQ(settings->model.gpt.head_chunk_rows, 256);
  EXPECT_EQ(settings->model.describe(),
            "gpt layers=8 d_model=256 heads=8 seq=128 vocab=256 head_chunk_rows=256");
  EXPECT_EQ(to_json(*job)["model"]["head_chunk_rows"], 256);
  EXPECT_EQ(parse(kTrain)->model.head_chunk_rows, 0);  // the logits kept, as before
  EXPECT_EQ(error_of("[model]\nhead_chunk_rows = -1\n" + kTrain),
            "job.toml:2: 'model.head_chunk_rows' must be at least 0, got -1");
  EXPECT_EQ(error_of("[model]\nkind = \"mlp\"\ndims = [4, 2]\nhead_chunk_rows = 8\n" + kTrain),
            "job.toml:4: 'model.head_chunk_rows' applies only to model.kind = \"gpt\"");
  EXPECT_EQ(
      error_of("[model]\nhead_chunk_rows = 64\n" + kTrain + "[parallel]\nlayout = \"pipefb\"\n"),
      "job.toml:2: model.head_chunk_rows computes the head's weight gradient in its "
      "forward, and parallel.layout = \"pipefb\" runs the head's backward on another "
      "rank: set parallel.layout = \"classic\" or \"auto\", or model.head_chunk_rows = 0");
}

TEST(JobConfigRanges, HeadChunkRowsAutoIsThePlannersAndNeedsPlannedStages) {
  const std::string planned = "[parallel]\nstages = \"auto\"\n";
  Result<JobConfig> job = parse("[model]\nhead_chunk_rows = \"auto\"\n" + kTrain + planned);
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_TRUE(job->model.head_chunk_auto);
  EXPECT_EQ(job->model.head_chunk_rows, 0);
  auto settings = train_settings_from(*job);
  ASSERT_TRUE(settings.ok());
  EXPECT_TRUE(settings->head_chunk_auto);
  EXPECT_EQ(settings->model.gpt.head_chunk_rows, 0);  // the plan decides
  EXPECT_EQ(to_json(*job)["model"]["head_chunk_rows"], "auto");
  EXPECT_FALSE(parse("[model]\nhead_chunk_rows = 64\n" + kTrain)->model.head_chunk_auto);
  EXPECT_EQ(error_of("[model]\nhead_chunk_rows = \"all\"\n" + kTrain + planned),
            "job.toml:2: 'model.head_chunk_rows' must be an integer >= 0 or \"auto\", got "
            "\"all\"");
  EXPECT_EQ(error_of("[model]\nhead_chunk_rows = \"auto\"\n" + kTrain + "[parallel]\nstages = 2\n"),
            "job.toml:2: model.head_chunk_rows = \"auto\" lets the planner choose whether to "
            "chunk the head, which needs parallel.stages = \"auto\": set parallel.stages = "
            "\"auto\" or model.head_chunk_rows to a number of rows");
  EXPECT_EQ(error_of("[model]\nhead_chunk_rows = \"auto\"\n" + kTrain + planned +
                     "layout = \"pipefb\"\n"),
            "job.toml:2: model.head_chunk_rows = \"auto\" has nothing to choose with "
            "parallel.layout = \"pipefb\", which needs the head whole: set parallel.layout = "
            "\"auto\" or \"classic\", or model.head_chunk_rows = 0");
}

TEST(JobConfigRanges, MlpDims) {
  EXPECT_EQ(error_of("[model]\nkind = \"mlp\"\ndims = [784]\n" + kTrain),
            "job.toml:3: 'model.dims' needs at least 2 widths (input and output), got 1");
  EXPECT_EQ(error_of("[model]\nkind = \"mlp\"\ndims = [784, 0, 10]\n" + kTrain),
            "job.toml:3: 'model.dims[1]' must be at least 1, got 0");
  EXPECT_EQ(error_of("[model]\nkind = \"mlp\"\n" + kTrain),
            "job.toml:2: model.kind = \"mlp\" needs 'model.dims', e.g. [784, 1024, 10]");
}

TEST(JobConfigRanges, KeysOfTheOtherModelKind) {
  EXPECT_EQ(error_of("[model]\nkind = \"mlp\"\ndims = [4, 2]\nlayers = 3\n" + kTrain),
            "job.toml:4: 'model.layers' applies only to model.kind = \"gpt\"");
  EXPECT_EQ(error_of("[model]\ndims = [4, 2]\n" + kTrain),
            "job.toml:2: 'model.dims' applies only to model.kind = \"mlp\"");
}

TEST(JobConfigRanges, Train) {
  EXPECT_EQ(error_of("[train]\nsteps = 1\nbatch = 0\n"),
            "job.toml:3: 'train.batch' must be at least 1, got 0");
  EXPECT_EQ(error_of("[train]\nsteps = 1\nmicrobatches = 0\n"),
            "job.toml:3: 'train.microbatches' must be at least 1, got 0");
  EXPECT_EQ(error_of("[train]\nsteps = 1\nmicrobatches = 3\n"),
            "job.toml:3: 'train.microbatches' (3) must divide 'train.batch' (16)");
  EXPECT_EQ(error_of("[train]\nsteps = 1\nlr = 0\n"),
            "job.toml:3: 'train.lr' must be greater than 0, got 0");
  EXPECT_EQ(error_of("[train]\nsteps = 1\nlr = -1e-3\n"),
            "job.toml:3: 'train.lr' must be greater than 0, got -0.001");
  EXPECT_EQ(error_of("[train]\nsteps = 1\nlr = nan\n"),
            "job.toml:3: 'train.lr' must be greater than 0, got nan");
  EXPECT_EQ(error_of("[train]\nsteps = 1\nbeta1 = 1.0\n"),
            "job.toml:3: 'train.beta1' must be in [0, 1), got 1");
  EXPECT_EQ(error_of("[train]\nsteps = 1\nbeta2 = -0.1\n"),
            "job.toml:3: 'train.beta2' must be in [0, 1), got -0.1");
  EXPECT_EQ(error_of("[train]\nsteps = 1\nmomentum = 1\n"),
            "job.toml:3: 'train.momentum' must be in [0, 1), got 1");
  EXPECT_EQ(error_of("[train]\nsteps = 1\neps = 0\n"),
            "job.toml:3: 'train.eps' must be greater than 0, got 0");
  EXPECT_EQ(error_of("[train]\nsteps = 1\nweight_decay = -1\n"),
            "job.toml:3: 'train.weight_decay' must be at least 0, got -1");
  EXPECT_EQ(error_of("[train]\nsteps = 0\n"),
            "job.toml:2: 'train.steps' must be at least 1, got 0");
  EXPECT_EQ(error_of("[train]\nsteps = 1\nseed = -1\n"),
            "job.toml:3: 'train.seed' must be at least 0, got -1");
  EXPECT_EQ(error_of("[train]\nsteps = 1\nclip_grad_norm = -0.5\n"),
            "job.toml:3: 'train.clip_grad_norm' must be at least 0, got -0.5");
}

TEST(JobConfigRanges, LearningRateSchedule) {
  const std::string cosine = "[train]\nsteps = 100\nlr_decay = \"cosine\"\n";
  EXPECT_EQ(error_of(cosine + "warmup_steps = -1\n"),
            "job.toml:4: 'train.warmup_steps' must be at least 0, got -1");
  EXPECT_EQ(error_of(cosine + "decay_steps = 0\n"),
            "job.toml:4: 'train.decay_steps' must be at least 1, got 0");
  EXPECT_EQ(error_of(cosine + "min_lr = -1e-5\n"),
            "job.toml:4: 'train.min_lr' must be at least 0, got -1e-05");
  EXPECT_EQ(error_of(cosine + "min_lr = 0.01\n"),
            "job.toml:4: 'train.min_lr' (0.01) must not exceed 'train.lr' (0.001)");
  EXPECT_EQ(error_of(cosine + "min_lr = 1e-4\n", {"train.lr=5e-5"}),
            "--set train.lr=5e-5: 'train.min_lr' (0.0001) must not exceed 'train.lr' (5e-05)");
  EXPECT_EQ(error_of(cosine + "warmup_steps = 20\ndecay_steps = 20\n"),
            "job.toml:5: 'train.decay_steps' (20) must exceed 'train.warmup_steps' (20): the "
            "decay starts after it");
  EXPECT_EQ(error_of("[train]\nsteps = 100\nmin_lr = 1e-5\n"),
            "job.toml:3: 'train.min_lr' needs a decay: set 'train.lr_decay' to \"cosine\" or "
            "\"linear\"");
  EXPECT_EQ(error_of("[train]\nsteps = 100\ndecay_steps = 50\n"),
            "job.toml:3: 'train.decay_steps' needs a decay: set 'train.lr_decay' to \"cosine\" "
            "or \"linear\"");
  // A warm-up alone, and one longer than the run, are fine.
  EXPECT_TRUE(parse("[train]\nsteps = 10\nwarmup_steps = 50\n").ok());
  Result<JobConfig> linear = parse(cosine, {"train.lr_decay=\"linear\"", "train.min_lr=1e-4"});
  ASSERT_TRUE(linear.ok()) << linear.status().message();
  EXPECT_EQ(linear->train.lr_decay, LrDecay::linear);
  EXPECT_DOUBLE_EQ(linear->train.min_lr, 1e-4);
}

TEST(JobConfigRanges, StepsXorEpochs) {
  EXPECT_EQ(error_of("[train]\nbatch = 4\nsteps = 10\nepochs = 2\n"),
            "job.toml:4: set 'train.steps' or 'train.epochs', not both");
  EXPECT_EQ(error_of("[model]\nlayers = 2\n\n[train]\nbatch = 4\n"),
            "job.toml:4: the job needs 'train.steps' or 'train.epochs'");
  EXPECT_EQ(error_of(""), "job.toml: the job needs 'train.steps' or 'train.epochs'");
}

TEST(JobConfigRanges, Stages) {
  const std::string p = kTrain + "[parallel]\n";
  EXPECT_EQ(error_of(p + "stages = \"many\"\n"),
            "job.toml:4: 'parallel.stages' must be \"auto\", a stage count or an array of "
            "[first, last] block ranges, got \"many\"");
  EXPECT_EQ(error_of(p + "stages = 2.5\n"),
            "job.toml:4: 'parallel.stages' must be \"auto\", a stage count or an array of "
            "[first, last] block ranges, got float");
  EXPECT_EQ(error_of(p + "stages = 0\n"),
            "job.toml:4: 'parallel.stages' must be at least 1, got 0");
  EXPECT_EQ(error_of(p + "stages = []\n"),
            "job.toml:4: 'parallel.stages' must list at least one range");
  EXPECT_EQ(error_of(p + "stages = [[0, 3, 4]]\n"),
            "job.toml:4: 'parallel.stages[0]' must be a [first, last] pair of block indices, "
            "got 3 entries");
  EXPECT_EQ(error_of(p + "stages = [3]\n"),
            "job.toml:4: 'parallel.stages[0]' must be a [first, last] pair of block indices, "
            "got integer");
  EXPECT_EQ(error_of(p + "stages = [[0, -1]]\n"),
            "job.toml:4: 'parallel.stages[0][1]' must be at least 0, got -1");
  EXPECT_EQ(error_of(p + "stages = [[0, 3], [5, 4]]\n"),
            "job.toml:4: 'parallel.stages[1]' runs backwards: first block 5 is after last block 4");
  EXPECT_EQ(error_of(p + "stages = [[1, 3]]\n"),
            "job.toml:4: 'parallel.stages[0]' must start at block 0 (ranges cover the blocks in "
            "order, without gaps), got 1");
  EXPECT_EQ(error_of(p + "stages = [\n  [0, 3],\n  [5, 7],\n]\n"),
            "job.toml:6: 'parallel.stages[1]' must start at block 4 (ranges cover the blocks in "
            "order, without gaps), got 5");
}

TEST(JobConfigRanges, OtherSections) {
  EXPECT_EQ(error_of(kTrain + "[parallel]\nreplicas = 0\n"),
            "job.toml:4: 'parallel.replicas' must be at least 1, got 0");
  EXPECT_EQ(error_of(kTrain + "[parallel]\nchunks = 0\n"),
            "job.toml:4: 'parallel.chunks' must be at least 1, got 0");
  EXPECT_EQ(error_of(kTrain + "[offload]\nkeep = -1\n"),
            "job.toml:4: 'offload.keep' must be at least 0, got -1");
  EXPECT_EQ(error_of(kTrain + "[offload]\nlookahead = -1\n"),
            "job.toml:4: 'offload.lookahead' must be at least 0, got -1");
  EXPECT_EQ(error_of(kTrain + "[memory]\ncap = \"lots\"\n"),
            "job.toml:4: 'memory.cap': cannot read 'lots' as a byte count: write e.g. 4096, "
            "512MiB or 8GiB");
  EXPECT_EQ(error_of(kTrain + "[memory]\ncap = 0\n"),
            "job.toml:4: 'memory.cap' must be at least 1, got 0");
  EXPECT_EQ(error_of(kTrain + "[memory]\ncap = \"0GiB\"\n"),
            "job.toml:4: 'memory.cap' must be at least 1 byte, got \"0GiB\"");
  EXPECT_EQ(error_of(kTrain + "[output]\ndir = \"\"\n"),
            "job.toml:4: 'output.dir' must not be empty");
  EXPECT_EQ(error_of(kTrain + "[output]\ncheckpoint_every = -5\n"),
            "job.toml:4: 'output.checkpoint_every' must be at least 0, got -5");
  EXPECT_EQ(error_of(kTrain + "[threads]\ncount = -2\n"),
            "job.toml:4: 'threads.count' must be at least 0, got -2");
}

TEST(JobConfigSyntax, ErrorsCarryLineAndColumn) {
  // Column 9 is the end of line, where the missing value should have been.
  const std::string message = error_of("[train]\nsteps = \n");
  EXPECT_EQ(message.rfind("job.toml:2:9: TOML syntax error: ", 0), 0u) << message;
  EXPECT_GT(message.size(), std::string("job.toml:2:9: TOML syntax error: ").size());
  EXPECT_EQ(message.find('\n'), std::string::npos);

  const std::string duplicate = error_of("[train]\nsteps = 1\nsteps = 2\n");
  EXPECT_EQ(duplicate.rfind("job.toml:3:", 0), 0u) << duplicate;
  EXPECT_NE(duplicate.find("TOML syntax error"), std::string::npos) << duplicate;
}

TEST(JobConfigOverrides, EachValueType) {
  Result<JobConfig> result =
      parse(kGptS, {"train.lr=0.01", "model.layers=4", "output.trace=false",
                    "data.path=\"/tmp/a b\"", "train.init_from=runs/x/ckpt-9.h5",
                    "parallel.stages=[[0,3],[4,7]]", "parallel.schedule=zb-h1",
                    "memory.cap=8GiB", "threads.count=2"});
  ASSERT_TRUE(result.ok()) << result.status().message();
  const JobConfig& c = *result;
  EXPECT_DOUBLE_EQ(c.train.lr, 0.01);
  EXPECT_EQ(c.model.layers, 4);
  EXPECT_FALSE(c.output.trace);
  EXPECT_EQ(c.data.path, "/tmp/a b");
  EXPECT_EQ(c.train.init_from, "runs/x/ckpt-9.h5");
  EXPECT_EQ(c.parallel.stages.ranges, (std::vector<StageRange>{{0, 3}, {4, 7}}));
  EXPECT_EQ(c.parallel.schedule, ScheduleKind::zb_h1);
  EXPECT_EQ(c.memory.cap, std::size_t{8} << 30);
  EXPECT_EQ(c.threads.count, 2);
}

TEST(JobConfigOverrides, BareWordsAndCounts) {
  Result<JobConfig> automatic =
      parse(kTrain + "[parallel]\nstages = 4\n", {"parallel.stages=auto"});
  ASSERT_TRUE(automatic.ok()) << automatic.status().message();
  EXPECT_EQ(automatic->parallel.stages.form, StagesSpec::Form::automatic);
  // Not TOML numbers, so they arrive as the strings they name.
  Result<JobConfig> schedule = parse(kTrain + "[parallel]\nschedule = \"gpipe\"\n",
                                     {"parallel.schedule=1f1b", "train.optimizer=sgd"});
  ASSERT_TRUE(schedule.ok()) << schedule.status().message();
  EXPECT_EQ(schedule->parallel.schedule, ScheduleKind::one_f_one_b);
  EXPECT_EQ(schedule->train.optimizer, OptimizerKind::sgd);
  Result<JobConfig> count = parse(kTrain, {"parallel.stages=3"});
  ASSERT_TRUE(count.ok()) << count.status().message();
  EXPECT_EQ(count->parallel.stages.form, StagesSpec::Form::count);
  EXPECT_EQ(count->parallel.stages.count, 3);
}

TEST(JobConfigOverrides, SwitchModelKind) {
  Result<JobConfig> result =
      parse(kTrain, {"model.kind=mlp", "model.dims=[784, 10]", "data.source=fashion-mnist"});
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_EQ(result->model.kind, ModelKind::mlp);
  EXPECT_EQ(result->model.dims, (std::vector<int>{784, 10}));
  EXPECT_EQ(result->data.source, DataKind::fashion_mnist);
}

TEST(JobConfigOverrides, LastOneWinsAndSpacesAreTrimmed) {
  Result<JobConfig> result = parse(kGptS, {"train.lr=0.5", " train.lr = 0.25 "});
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_DOUBLE_EQ(result->train.lr, 0.25);
}

TEST(JobConfigOverrides, AppliedBeforeValidation) {
  // The file alone is invalid; the override repairs it.
  Result<JobConfig> repaired = parse("[model]\nlayers = 0\n" + kTrain, {"model.layers=2"});
  ASSERT_TRUE(repaired.ok()) << repaired.status().message();
  EXPECT_EQ(repaired->model.layers, 2);
  // steps from the file plus epochs from the command line is the same conflict as in the file.
  EXPECT_EQ(error_of(kTrain, {"train.epochs=2"}),
            "--set train.epochs=2: set 'train.steps' or 'train.epochs', not both");
}

TEST(JobConfigOverrides, Errors) {
  EXPECT_EQ(error_of(kTrain, {"train.lrr=1"}),
            "--set train.lrr=1: unknown key 'train.lrr' (did you mean 'train.lr'?)");
  EXPECT_EQ(error_of(kTrain, {"trian.lr=1"}),
            "--set trian.lr=1: unknown key 'trian.lr' (did you mean 'train.lr'?)");
  EXPECT_EQ(error_of(kTrain, {"train.lr"}), "--set train.lr: expected section.key=value");
  EXPECT_EQ(error_of(kTrain, {"lr=1"}),
            "--set lr=1: expected section.key=value, e.g. train.lr=0.01 "
            "(did you mean 'train.lr'?)");
  EXPECT_EQ(error_of(kTrain, {".lr=1"}),
            "--set .lr=1: expected section.key=value, e.g. train.lr=0.01");
  EXPECT_EQ(error_of(kTrain, {"train.=1"}),
            "--set train.=1: expected section.key=value, e.g. train.lr=0.01");
  const std::string bad_array = error_of(kTrain, {"model.dims=[784,"});
  EXPECT_EQ(bad_array.rfind("--set model.dims=[784,: not a valid TOML value: ", 0), 0u)
      << bad_array;
  EXPECT_EQ(error_of(kTrain, {"train.lr=1\nx = 2"}),
            "--set train.lr=1\nx = 2: the value must be a single TOML value");
}

TEST(JobConfigOverrides, ValueErrorsNameTheOverride) {
  EXPECT_EQ(error_of(kGptS, {"model.layers=abc"}),
            "--set model.layers=abc: 'model.layers' must be an integer, got string");
  EXPECT_EQ(error_of(kGptS, {"train.lr=-1"}),
            "--set train.lr=-1: 'train.lr' must be greater than 0, got -1");
  // The override is the newest change, so the clash with the file's d_model is blamed on it.
  EXPECT_EQ(error_of(kGptS, {"model.heads=7"}),
            "--set model.heads=7: 'model.d_model' (256) must be divisible by 'model.heads' (7)");
}

TEST(JobConfigFiles, LoadsAndNamesThePath) {
  const std::filesystem::path dir =
      std::filesystem::path(testing::TempDir()) / "spillway_test_job_config";
  std::filesystem::create_directories(dir);
  const std::string good = (dir / "good.toml").string();
  const std::string bad = (dir / "bad.toml").string();
  std::ofstream(good) << kGptS;
  std::ofstream(bad) << "[train]\nsteps = 1\nlrr = 2\n";

  Result<JobConfig> loaded = load_job_file(good, {"train.steps=5"});
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(loaded->train.steps, 5);

  Result<JobConfig> invalid = load_job_file(bad, {});
  ASSERT_FALSE(invalid.ok());
  EXPECT_EQ(invalid.status().code(), StatusCode::config_error);
  EXPECT_EQ(invalid.status().message(),
            bad + ":3: unknown key 'train.lrr' (did you mean 'train.lr'?)");

  const std::string missing = (dir / "missing.toml").string();
  Result<JobConfig> absent = load_job_file(missing, {});
  ASSERT_FALSE(absent.ok());
  EXPECT_EQ(absent.status().code(), StatusCode::not_found);
  EXPECT_EQ(absent.status().message(), "job file '" + missing + "' does not exist");

  Result<JobConfig> directory = load_job_file(dir.string(), {});
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.status().code(), StatusCode::io_error);
  EXPECT_EQ(directory.status().message(),
            "cannot read job file '" + dir.string() + "': it is a directory");
  std::filesystem::remove_all(dir);
}

TEST(JobConfigJson, CarriesResolvedValues) {
  Result<JobConfig> result = parse(kGptS, {"memory.cap=1GiB"});
  ASSERT_TRUE(result.ok()) << result.status().message();
  const nlohmann::json j = to_json(*result);
  EXPECT_EQ(j["model"]["kind"], "gpt");
  EXPECT_EQ(j["model"]["layers"], 8);
  EXPECT_EQ(j["model"]["d_model"], 256);
  EXPECT_FALSE(j["model"].contains("dims"));
  EXPECT_EQ(j["data"]["source"], "text");
  EXPECT_EQ(j["data"]["path"], "/usr/share/games/fortunes");
  EXPECT_EQ(j["train"]["steps"], 200);
  EXPECT_FALSE(j["train"].contains("epochs"));
  EXPECT_EQ(j["train"]["optimizer"], "adamw");
  EXPECT_DOUBLE_EQ(j["train"]["lr"].get<double>(), 1e-3);
  EXPECT_EQ(j["train"]["lr_decay"], "constant");
  EXPECT_EQ(j["train"]["warmup_steps"], 0);
  EXPECT_FALSE(j["train"].contains("decay_steps"));  // unset: the run's last step
  EXPECT_EQ(j["parallel"]["stages"], "auto");
  EXPECT_EQ(j["parallel"]["schedule"], "1f1b");
  EXPECT_EQ(j["parallel"]["layout"], "auto");
  EXPECT_EQ(j["offload"]["tier"], "none");
  EXPECT_EQ(j["memory"]["cap"], std::size_t{1} << 30);
  EXPECT_EQ(j["output"]["dir"], "runs/gpt-s");
  EXPECT_EQ(j["threads"]["count"], 0);

  Result<JobConfig> mlp = parse(kFashionMnist);
  ASSERT_TRUE(mlp.ok()) << mlp.status().message();
  const nlohmann::json m = to_json(*mlp);
  EXPECT_EQ(m["model"]["dims"], nlohmann::json({784, 1024, 1024, 1024, 10}));
  EXPECT_FALSE(m["model"].contains("layers"));
  EXPECT_EQ(m["train"]["epochs"], 3);
  EXPECT_FALSE(m["train"].contains("steps"));
  EXPECT_TRUE(m["memory"].is_object());
  EXPECT_FALSE(m["memory"].contains("cap"));
}

// JSON scalars and arrays of scalars are valid TOML values, so this is all a round trip needs.
std::string json_to_toml(const nlohmann::json& config) {
  std::string text;
  for (const auto& [section, keys] : config.items()) {
    text += "[" + section + "]\n";
    for (const auto& [key, value] : keys.items()) text += key + " = " + value.dump() + "\n";
  }
  return text;
}

TEST(JobConfigJson, RoundTripsThroughAJobFile) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> jobs = {
      {kGptS, {}},
      {kFashionMnist, {}},
      {kEverything, {}},
      {kEverything, {"parallel.stages=5", "train.optimizer=sgd", "memory.cap=12345"}},
      {kTrain, {"data.source=synthetic"}},
      {kGptS, {"offload.tier=auto"}},
      {kGptS, {"offload.engine_pu=none"}},
      {"[model]\nsplit_layers = [[4, 1], [6, 3]]\n" + kTrain, {}},
      {"[model]\nsplit_layers = \"auto\"\n" + kTrain, {"parallel.stages=auto"}},
      {"[model]\nhead_chunk_rows = \"auto\"\n" + kTrain, {"parallel.stages=auto"}},
  };
  for (const auto& [text, overrides] : jobs) {
    Result<JobConfig> original = parse(text, overrides);
    ASSERT_TRUE(original.ok()) << original.status().message();
    const std::string rewritten = json_to_toml(to_json(*original));
    Result<JobConfig> reread = parse_job_string(rewritten, "report.toml", {});
    ASSERT_TRUE(reread.ok()) << reread.status().message() << "\n" << rewritten;
    EXPECT_TRUE(*reread == *original) << rewritten;
  }
}

TEST(JobConfigNames, JobFileSpellings) {
  EXPECT_EQ(to_string(ModelKind::mlp), "mlp");
  EXPECT_EQ(to_string(DataKind::fashion_mnist), "fashion-mnist");
  EXPECT_EQ(to_string(OptimizerKind::sgd), "sgd");
  EXPECT_EQ(to_string(ScheduleKind::one_f_one_b), "1f1b");
  EXPECT_EQ(to_string(ScheduleKind::zb_h1), "zb-h1");
  EXPECT_EQ(to_string(Layout::automatic), "auto");
  EXPECT_EQ(to_string(OffloadTier::peer), "peer");
}

}  // namespace
}  // namespace spw

namespace spw {
namespace {

TEST(JobConfigEval, HeldOutTextAndTheEvaluationsAgree) {
  EXPECT_EQ(error_of("[train]\nsteps = 10\n[eval]\nevery = 5\n"),
            "job.toml:4: 'eval.every' evaluates on held-out text, but 'data.holdout' is 0: set "
            "it to the fraction of the corpus to keep out of training (0.05 keeps the last 5%)");
  EXPECT_EQ(error_of("[data]\nholdout = 1\n[train]\nsteps = 10\n"),
            "job.toml:2: 'data.holdout' must be in [0, 1), got 1");
  EXPECT_EQ(error_of("[data]\nholdout = -0.1\n[train]\nsteps = 10\n"),
            "job.toml:2: 'data.holdout' must be in [0, 1), got -0.1");
  EXPECT_EQ(error_of("[data]\nsource = \"fashion-mnist\"\nholdout = 0.1\n[model]\nkind = "
                     "\"mlp\"\ndims = [784, 10]\n[train]\nsteps = 10\n"),
            "job.toml:3: 'data.holdout' splits a text corpus or token file; \"fashion-mnist\" "
            "data evaluates on its t10k test set: remove 'data.holdout'");
  EXPECT_EQ(error_of("[data]\nsource = \"synthetic\"\nholdout = 0.1\n[train]\nsteps = 10\n"),
            "job.toml:3: 'data.holdout' splits a text corpus or token file; \"synthetic\" data "
            "evaluates on samples training never draws: remove 'data.holdout'");
  EXPECT_EQ(error_of("[train]\nsteps = 10\n[eval]\nbatches = 0\n"),
            "job.toml:4: 'eval.batches' must be at least 1, got 0");
  EXPECT_EQ(error_of("[train]\nsteps = 10\n[eval]\nevery = -1\n"),
            "job.toml:4: 'eval.every' must be at least 0, got -1");
  // Synthetic data and Fashion-MNIST evaluate without a split; text with one.
  auto synthetic = parse("[data]\nsource = \"synthetic\"\n[train]\nsteps = 10\n[eval]\n"
                         "every = 5\n");
  ASSERT_TRUE(synthetic.ok()) << synthetic.status().message();
  auto text = parse("[data]\nholdout = 0.05\n[train]\nsteps = 10\n[eval]\nevery = 5\n",
                    {"eval.batches=2"});
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_EQ(text->eval.batches, 2);
  EXPECT_EQ(to_json(*text)["eval"], (nlohmann::json{{"every", 5}, {"batches", 2}}));
  EXPECT_EQ(to_json(*text)["data"]["holdout"], 0.05);
}

TEST(JobConfigTokens, ATokenFileTakesAnyVocabularyItsIdsFit) {
  const std::string tokens =
      "[model]\nvocab = 50257\n[data]\nsource = \"tokens\"\n"
      "path = \"/srv/train.bin\"\n" +
      kTrain;
  auto config = parse(tokens);
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ(config->model.vocab, 50257);
  EXPECT_EQ(config->data.source, DataKind::tokens);
  EXPECT_EQ(config->data.token_bytes, 2);
  EXPECT_EQ(
      to_json(*config)["data"],
      (nlohmann::json{
          {"source", "tokens"}, {"path", "/srv/train.bin"}, {"holdout", 0.0}, {"token_bytes", 2}}));
  // Text leaves token_bytes out of the report: it has no meaning there.
  auto text = parse(kTrain);
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_FALSE(to_json(*text)["data"].contains("token_bytes"));
  // Wider ids, a holdout and evaluations on it.
  auto wide = parse(
      tokens, {"model.vocab=100000", "data.token_bytes=4", "data.holdout=0.1", "eval.every=5"});
  ASSERT_TRUE(wide.ok()) << wide.status().message();
  EXPECT_EQ(wide->data.token_bytes, 4);
  EXPECT_EQ(wide->data.holdout, 0.1);
  EXPECT_EQ(to_string(DataKind::tokens), "tokens");
}

TEST(JobConfigTokens, MistakesNameTheKeyToChange) {
  EXPECT_EQ(error_of("[data]\nsource = \"tokens\"\n" + kTrain),
            "job.toml:2: data.source = \"tokens\" needs 'data.path': a file of token ids, 2 "
            "bytes each (uint16, as nanoGPT's train.bin) or 4 with data.token_bytes = 4");
  const std::string tokens = "[data]\nsource = \"tokens\"\npath = \"t.bin\"\n" + kTrain;
  EXPECT_EQ(error_of(tokens, {"data.token_bytes=3"}),
            "--set data.token_bytes=3: 'data.token_bytes' must be 2 (uint16 ids) or 4 (uint32 "
            "ids), got 3");
  EXPECT_EQ(error_of(tokens, {"model.vocab=65537"}),
            "--set model.vocab=65537: 'model.vocab' 65537 has ids that 2-byte tokens cannot "
            "hold: set data.token_bytes = 4");
  EXPECT_TRUE(parse(tokens, {"model.vocab=65536"}).ok());
  EXPECT_EQ(error_of(tokens, {"eval.every=5"}),
            "--set eval.every=5: 'eval.every' evaluates on held-out tokens, but 'data.holdout' "
            "is 0: set it to the fraction of the corpus to keep out of training (0.05 keeps the "
            "last 5%)");
  EXPECT_EQ(error_of(kTrain + "[data]\ntoken_bytes = 4\n"),
            "job.toml:4: 'data.token_bytes' applies only to data.source = \"tokens\"");
}

TEST(JobConfigEval, KeepingTheBestNeedsEvaluations) {
  EXPECT_EQ(error_of(kTrain + "[output]\nkeep_best = true\n"),
            "job.toml:4: 'output.keep_best' keeps the checkpoint with the lowest eval loss, but "
            "nothing evaluates: set 'eval.every'");
  auto kept = parse("[data]\nsource = \"synthetic\"\n[train]\nsteps = 10\n[eval]\nevery = 5\n"
                    "[output]\nkeep_best = true\n");
  ASSERT_TRUE(kept.ok()) << kept.status().message();
  EXPECT_EQ(to_json(*kept)["output"]["keep_best"], true);
}

TEST(JobConfigEval, EvaluatesEveryNStepsAndAfterTheLast) {
  EvalConfig eval;
  EXPECT_FALSE(eval.after(10, 10));  // every = 0: never
  eval.every = 4;
  std::vector<std::int64_t> steps;
  for (std::int64_t step = 1; step <= 10; ++step) {
    if (eval.after(step, 10)) steps.push_back(step);
  }
  EXPECT_EQ(steps, (std::vector<std::int64_t>{4, 8, 10}));
}

}  // namespace
}  // namespace spw
