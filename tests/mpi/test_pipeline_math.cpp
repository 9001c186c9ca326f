// The pipeline computes what the single-rank trainer computes: for every schedule, P in
// {1, 2, 4} pipeline ranks, R in {1, 2} replicas (P·R up to the ranks launched) and m in
// {1, 4, 8} microbatches per replica, 10 steps give the trainer's losses and weights within
// 1e-5, and the same run twice is bit-identical. Each configuration runs on the first P·R
// ranks of the world; the trainer runs on rank 0, which compares.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "runtime/pipeline_executor.hpp"
#include "runtime/train_command.hpp"
#include "runtime/trainer.hpp"

namespace spw {
namespace {

constexpr int kSteps = 10;

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// Eight blocks (embedding, six transformer blocks, head), so four ranks can hold two
// chunks each. SGD with momentum: its update is linear in the gradient, so the rounding
// differences of a differently ordered sum (replicas) stay rounding-sized; AdamW divides
// by sqrt(v) and blows up the noise on gradients that are zero in exact arithmetic.
TrainSettings tiny_gpt(int global_microbatches, const std::string& optimizer = "sgd") {
  TrainSettings s;
  s.model.kind = "gpt";
  s.model.gpt.layers = 6;
  s.model.gpt.d_model = 16;
  s.model.gpt.heads = 2;
  s.model.gpt.seq = 8;
  s.data.source = DataKind::synthetic;
  s.batch = 16;
  s.microbatches = global_microbatches;
  s.steps = kSteps;
  s.optimizer.kind = optimizer;
  s.optimizer.lr = optimizer == "sgd" ? 0.1 : 1e-2;
  s.optimizer.momentum = 0.9;
  s.optimizer.weight_decay = 0.01;
  s.seed = 7;
  return s;
}

struct Outcome {
  bool ok = false;
  std::string error;
  std::vector<double> loss;
  std::map<std::string, std::vector<float>> weights;  // rank 0 only
  std::map<std::string, std::vector<float>> replica1_weights;
};

Outcome reference(const TrainSettings& settings) {
  Outcome run;
  auto trainer = Trainer::create(settings);
  if (!trainer.ok()) {
    run.error = trainer.status().message();
    return run;
  }
  for (int i = 0; i < kSteps; ++i) {
    StepResult step;
    const Status status = (*trainer)->run_step(step);
    if (!status.ok()) {
      run.error = status.message();
      return run;
    }
    run.loss.push_back(step.loss);
  }
  for (const auto& p : (*trainer)->model().parameters()) {
    run.weights[p.name].assign(p.value->data(), p.value->data() + p.value->numel());
  }
  run.ok = true;
  return run;
}

// Collective over MPI_COMM_WORLD; ranks beyond P·R sit the run out.
Outcome pipeline(const TrainSettings& train, const std::string& schedule, int P, int R) {
  const int rank = world_rank();
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, rank < P * R ? 0 : MPI_UNDEFINED, rank, &comm);
  Outcome run;
  if (comm != MPI_COMM_NULL) {
    ParallelConfig parallel;
    parallel.stages.form = StagesSpec::Form::count;
    parallel.stages.count = P * (schedule == "interleaved" ? 2 : 1);
    parallel.chunks = schedule == "interleaved" ? 2 : 1;
    parallel.replicas = R;
    parallel.schedule = schedule == "gpipe"         ? ScheduleKind::gpipe
                        : schedule == "1f1b"        ? ScheduleKind::one_f_one_b
                        : schedule == "interleaved" ? ScheduleKind::interleaved
                                                    : ScheduleKind::zb_h1;
    PipelineSettings settings;
    settings.train = train;
    auto layout = make_pipeline_layout(parallel, train.model.block_count(), train.batch,
                                       train.microbatches, P * R);
    Status status = layout.status();
    if (layout.ok()) {
      settings.layout = *layout;
      auto executor = PipelineExecutor::create(settings, comm);
      status = executor.status();
      for (int i = 0; status.ok() && i < kSteps; ++i) {
        StepResult step;
        status = (*executor)->run_step(step);
        run.loss.push_back(step.loss);
      }
      if (status.ok()) {
        auto weights = (*executor)->gather_parameters(0);
        auto replica1 = R > 1 ? (*executor)->gather_parameters(1) : weights;
        status = weights.ok() ? replica1.status() : weights.status();
        if (status.ok()) {
          run.weights = std::move(weights).value();
          if (R > 1) run.replica1_weights = std::move(replica1).value();
        }
      }
    }
    run.ok = status.ok();
    run.error = status.message();
    MPI_Comm_free(&comm);
  }
  return run;
}

double max_relative(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

std::vector<int> microbatch_counts() { return {1, 4, 8}; }

struct Shape {
  int P, R;
};

std::vector<Shape> shapes_that_fit() {
  std::vector<Shape> shapes;
  for (Shape s : {Shape{1, 1}, Shape{2, 1}, Shape{4, 1}, Shape{1, 2}, Shape{2, 2}}) {
    if (s.P * s.R <= world_size()) shapes.push_back(s);
  }
  return shapes;
}

bool runnable(const std::string& schedule, int P, int m) {
  // Interleaving needs the microbatches per replica to be a multiple of P (Megatron's rule).
  return schedule != "interleaved" || m % P == 0;
}

// ASSERTs here leave this helper only, never the loop of collective runs around it.
void expect_same(const Outcome& run, const Outcome& ref, int replicas, const std::string& where) {
  ASSERT_TRUE(run.ok) << where << ": " << run.error;
  ASSERT_TRUE(ref.ok) << ref.error;
  ASSERT_EQ(run.loss.size(), ref.loss.size());
  for (std::size_t i = 0; i < ref.loss.size(); ++i) {
    EXPECT_NEAR(run.loss[i], ref.loss[i], 1e-5 * std::abs(ref.loss[i]))
        << where << " step " << i + 1;
  }
  ASSERT_EQ(run.weights.size(), ref.weights.size()) << where;
  for (const auto& [name, values] : ref.weights) {
    ASSERT_TRUE(run.weights.count(name)) << where << ": " << name << " missing";
    EXPECT_EQ(run.weights.at(name).size(), values.size()) << where << " " << name;
    EXPECT_LT(max_relative(run.weights.at(name), values), 1e-5) << where << " " << name;
    // Replicas apply the same all-reduced gradient: they must stay identical.
    if (replicas > 1) {
      EXPECT_EQ(run.replica1_weights.at(name), run.weights.at(name)) << where;
    }
  }
  // One replica runs the trainer's operations in the trainer's order: nothing differs.
  if (replicas == 1) {
    EXPECT_EQ(run.loss, ref.loss) << where;
    EXPECT_EQ(run.weights, ref.weights) << where;
  }
}

class PipelineMath : public ::testing::TestWithParam<std::string> {};

TEST_P(PipelineMath, MatchesTheSingleRankTrainer) {
  const std::string schedule = GetParam();
  std::map<int, Outcome> references;  // by global microbatch count, rank 0 only
  for (Shape shape : shapes_that_fit()) {
    for (int m : microbatch_counts()) {
      if (!runnable(schedule, shape.P, m)) continue;
      const TrainSettings settings = tiny_gpt(m * shape.R);
      const Outcome run = pipeline(settings, schedule, shape.P, shape.R);
      if (world_rank() != 0) continue;
      const std::string where = schedule + " P=" + std::to_string(shape.P) +
                                " R=" + std::to_string(shape.R) + " m=" + std::to_string(m);
      if (!references.count(m * shape.R)) references[m * shape.R] = reference(settings);
      expect_same(run, references[m * shape.R], shape.R, where);
    }
  }
}

TEST_P(PipelineMath, SameRunTwiceIsBitIdentical) {
  const std::string schedule = GetParam();
  const Shape shape = shapes_that_fit().back();
  const TrainSettings settings = tiny_gpt(4 * shape.R, "adamw");
  const Outcome first = pipeline(settings, schedule, shape.P, shape.R);
  const Outcome second = pipeline(settings, schedule, shape.P, shape.R);
  if (world_rank() != 0) return;
  ASSERT_TRUE(first.ok) << first.error;
  ASSERT_TRUE(second.ok) << second.error;
  EXPECT_EQ(first.loss, second.loss);
  EXPECT_EQ(first.weights, second.weights);
}

INSTANTIATE_TEST_SUITE_P(Schedules, PipelineMath,
                         ::testing::Values("gpipe", "1f1b", "interleaved", "zb-h1"),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           std::string name = param.param;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace spw
