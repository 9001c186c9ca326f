// The planner's memory model against the executor, on 2 ranks: a small GPT is profiled
// (rank 0) and its links measured, then each layout is predicted by sched::predict, run for
// a few steps, and every rank's ledger peak compared with the prediction. The prediction
// must bound the peak, and stay within 25% of it. Measured here it is exact to 0.3% (the
// replica cases too, whose microbatches are 4x the profiled one: the planner scales only
// the scratch growth the profiler measured; scaling all 1.1 MiB of scratch put them 3-4%
// high), but for PipeFB's forward rank: how many stashes it holds follows its backward
// rank's pace, so the model gives it the most it may hold (kForwardStashesWaiting waiting
// and one computing), and a run whose backward rank keeps up holds one slot fewer (a slot
// is a fifth to a quarter of that rank's peak here): there the prediction may exceed the
// peak by 25% or by one slot (and 1%). The bound below allows 1%: with the offload thread,
// an activation-sized buffer (0.3% here) can stay a little longer than the timeline says,
// the more so on a loaded machine (0.7% seen); with offload, a copy the loaded engine
// finishes late keeps part of a stash resident longer (2.7% seen under ctest -j2; 1.1 slots,
// 14%, once the AVX2 kernels made compute 2-3x faster beside the same file writes), so there
// it allows two slots more. A plan made under a cap then runs under that cap.
//
// SPW_MEMORY_MODEL_JOB=path.toml runs the same comparison on that job's model, batch and
// microbatches, with SPW_MEMORY_MODEL_SET="section.key=value ..." as --set overrides (e.g.
// examples/gpt-s.toml with "train.microbatches=8"), printing the table;
// SPW_MEMORY_MODEL_LOOKAHEAD=n sets the executor's (and the prediction's) receive lookahead.
#include <cstdlib>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "partition/planner.hpp"
#include "pipeline_test_support.hpp"
#include "runtime/auto_plan.hpp"
#include "runtime/profiler.hpp"
#include "runtime/rank_links.hpp"

namespace spw {
namespace {

constexpr int kRunSteps = 4;
constexpr double kSlack = 1.25;
constexpr double kShort = 0.99;

int receive_lookahead() {
  const char* text = std::getenv("SPW_MEMORY_MODEL_LOOKAHEAD");
  return text != nullptr ? std::atoi(text) : PipelineSettings{}.receive_lookahead;
}

// gpt-s's width at half its sequence and depth: passes of a few milliseconds, long next to
// MPI's and the offload thread's own delays, as in real runs (with a d = 64 toy the copy
// thread's scheduling, not the schedule, decides what is resident).
TrainSettings small_gpt() {
  TrainSettings s = tiny_gpt(8, "adamw");
  s.model.gpt.layers = 4;
  s.model.gpt.d_model = 256;
  s.model.gpt.heads = 4;
  s.model.gpt.seq = 64;
  s.steps = kRunSteps;
  return s;
}

Result<TrainSettings> settings_under_test() {
  const char* job_path = std::getenv("SPW_MEMORY_MODEL_JOB");
  if (job_path == nullptr) return small_gpt();
  std::vector<std::string> overrides;
  if (const char* set = std::getenv("SPW_MEMORY_MODEL_SET")) {
    std::istringstream words(set);
    for (std::string word; words >> word;) overrides.push_back(word);
  }
  SPW_ASSIGN_OR_RETURN(JobConfig job, load_job_file(job_path, overrides));
  SPW_ASSIGN_OR_RETURN(TrainSettings settings, train_settings_from(job));
  settings.steps = kRunSteps;
  return settings;
}

// Rank 0 profiles; every rank gets the same profile.
Result<sched::ModelProfile> shared_profile(const TrainSettings& settings, MPI_Comm comm) {
  std::string text;
  Status status = Status::success();
  if (world_rank() == 0) {
    ProfileOptions options;
    options.microbatch_samples = settings.batch / settings.microbatches;
    auto profile = profile_model(settings, options);
    status = profile.status();
    if (profile.ok()) text = sched::profile_to_json(*profile);
  }
  int length = static_cast<int>(text.size());
  MPI_Bcast(&length, 1, MPI_INT, 0, comm);
  if (length == 0) return status.ok() ? error(StatusCode::internal, "no profile") : status;
  text.resize(static_cast<std::size_t>(length));
  MPI_Bcast(text.data(), length, MPI_CHAR, 0, comm);
  return sched::profile_from_json(text, "profile");
}

OffloadTier runtime_tier(sched::OffloadTier tier) {
  switch (tier) {
    case sched::OffloadTier::file: return OffloadTier::file;
    case sched::OffloadTier::peer: return OffloadTier::peer;
    default: return OffloadTier::none;
  }
}

// Runs the layout on `comm` (its ranks in plan order) and returns, on every rank, each
// rank's ledger peak by its place in the layout (replica * ranks in a pipeline + list);
// `step_s` gets this rank's mean step time after the first.
struct MeasuredRank {
  std::int64_t peak = 0;      // the ledger's
  std::int64_t slot = 0;      // the rank's largest microbatch slot
  bool forward_only = false;  // PipeFB's forward ranks
};

// Every rank's, in pipeline order.
Result<std::vector<MeasuredRank>> measured_ranks(const TrainSettings& train,
                                                 const PipelineLayout& layout,
                                                 const OffloadConfig& offload, MPI_Comm comm,
                                                 double* step_s = nullptr) {
  PipelineSettings settings;
  settings.train = train;
  settings.layout = layout;
  settings.offload = offload;
  settings.receive_lookahead = receive_lookahead();
  MemoryLedger::process().reset_peaks();
  auto executor = PipelineExecutor::create(settings, comm);
  if (!executor.ok()) return executor.status();
  double seconds = 0;
  for (int i = 0; i < kRunSteps; ++i) {
    StepResult step;
    const Status status = (*executor)->run_step(step);
    if (!status.ok()) {
      std::fprintf(stderr, "rank %d failed mid-run: %s\n", world_rank(), status.message().c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (i > 0) seconds += step.seconds / (kRunSteps - 1);
  }
  if (step_s != nullptr) *step_s = seconds;
  const int place = (*executor)->replica() * layout.ranks_in_pipeline() +
                    (*executor)->pipeline_rank();
  long long slot = 0;
  for (std::size_t c = 0; c < (*executor)->local_chunks(); ++c)
    slot = std::max<long long>(slot, (*executor)->stash_bytes(static_cast<int>(c)));
  const long long forward_only = (*executor)->owns_parameters() ? 0 : 1;
  executor->reset();
  (void)MemoryLedger::process().set_cap(std::nullopt);
  const long long mine[4] = {place, static_cast<long long>(MemoryLedger::process().peak_total()),
                             slot, forward_only};
  int size = 0;
  MPI_Comm_size(comm, &size);
  std::vector<long long> all(4 * static_cast<std::size_t>(size));
  MPI_Allgather(mine, 4, MPI_LONG_LONG, all.data(), 4, MPI_LONG_LONG, comm);
  std::vector<MeasuredRank> ranks(static_cast<std::size_t>(size));
  for (std::size_t r = 0; r < static_cast<std::size_t>(size); ++r) {
    MeasuredRank& rank = ranks[static_cast<std::size_t>(all[4 * r])];
    rank.peak = all[4 * r + 1];
    rank.slot = all[4 * r + 2];
    rank.forward_only = all[4 * r + 3] != 0;
  }
  return ranks;
}

struct Case {
  std::string name;
  ParallelConfig parallel;
  OffloadConfig offload;
  int microbatches = 0;  // 0: the settings'
};

std::vector<Case> cases() {
  const auto classic = [](const char* name, ScheduleKind kind, int chunks, OffloadTier tier,
                          int keep) {
    Case c{name, {}, {}};
    c.parallel.stages.form = StagesSpec::Form::count;
    c.parallel.stages.count = world_size() * chunks;
    c.parallel.chunks = chunks;
    c.parallel.schedule = kind;
    c.offload.tier = tier;
    c.offload.keep = keep;
    c.offload.lookahead = 1;
    return c;
  };
  std::vector<Case> all = {
      classic("gpipe", ScheduleKind::gpipe, 1, OffloadTier::none, 0),
      classic("1f1b", ScheduleKind::one_f_one_b, 1, OffloadTier::none, 0),
      classic("zb-h1", ScheduleKind::zb_h1, 1, OffloadTier::none, 0),
      classic("interleaved", ScheduleKind::interleaved, 2, OffloadTier::none, 0),
      classic("gpipe file keep 1", ScheduleKind::gpipe, 1, OffloadTier::file, 1),
      classic("1f1b file keep 0", ScheduleKind::one_f_one_b, 1, OffloadTier::file, 0),
      classic("zb-h1 file keep 0", ScheduleKind::zb_h1, 1, OffloadTier::file, 0),
  };
  // Replicas of a one-rank pipeline, its chunks handed on locally, one microbatch each: what
  // the planner picks under a cap on this model (APlanMadeUnderACapRunsUnderIt).
  for (const auto& [name, tier, keep, lookahead] :
       {std::tuple{"replicas v=4", OffloadTier::none, 0, 0},
        std::tuple{"replicas v=4 file keep 2", OffloadTier::file, 2, 1},
        std::tuple{"replicas v=4 file keep 3", OffloadTier::file, 3, 0}}) {
    Case c = classic(name, ScheduleKind::interleaved, 4, tier, keep);
    c.offload.lookahead = lookahead;
    c.parallel.replicas = world_size();
    c.parallel.stages.form = StagesSpec::Form::ranges;
    c.parallel.stages.ranges = {{0, 0}, {1, 1}, {2, 3}, {4, 5}};
    c.microbatches = world_size();
    all.push_back(c);
  }
  // A PipeFB backward rank holds one stash at a time, so with keep 1 nothing is offloaded,
  // but the tier's engine is on: slots give their memory back and the staging buffer counts.
  // (With keep 0 the backward rank copies each stash out and straight back; how far the
  // forward rank then runs ahead depends on how the copy thread shares the cores, which the
  // profile does not see: its peak varied between 58.6 and 75.4 MiB in three runs of the
  // same job, around a prediction of 67.0.)
  for (OffloadTier tier : {OffloadTier::none, OffloadTier::file}) {
    Case c{tier == OffloadTier::none ? "pipefb" : "pipefb file keep 1", {}, {}};
    c.parallel.stages.form = StagesSpec::Form::count;
    c.parallel.stages.count = world_size() / 2;
    c.parallel.layout = Layout::pipefb;
    c.offload.tier = tier;
    c.offload.keep = 1;
    c.offload.lookahead = 1;
    all.push_back(c);
  }
  return all;
}

class MemoryModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // More ranks than cores would time the run unlike the profile: measured on request only.
    if (world_size() != 2 && std::getenv("SPW_MEMORY_MODEL_JOB") == nullptr)
      GTEST_SKIP() << "compares 2-rank pipelines; run with 2 ranks";
    auto settings = settings_under_test();
    ASSERT_TRUE(settings.ok()) << settings.status().message();
    settings_ = *settings;
    auto profile = shared_profile(settings_, MPI_COMM_WORLD);
    ASSERT_TRUE(profile.ok()) << profile.status().message();
    profile_ = *profile;
    MicrobatchData mb;
    mb.samples = settings_.batch / settings_.microbatches;
    mb.seq = settings_.model.positions_per_sample();
    auto topology = measure_rank_topology(
        MPI_COMM_WORLD, settings_.model.activation_shape(0, mb).numel() * 4);
    ASSERT_TRUE(topology.ok()) << topology.status().message();
    topology_ = *topology;
  }

  TrainSettings settings_;
  sched::ModelProfile profile_;
  sched::RankTopology topology_;
};

std::string mib(std::int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", static_cast<double>(bytes) / (1 << 20));
  return text;
}

TEST_F(MemoryModelTest, PredictedPeakBoundsEveryRanksPeakWithin25Percent) {
  for (const Case& c : cases()) {
    TrainSettings train = settings_;
    if (c.microbatches > 0) train.microbatches = c.microbatches;
    auto layout = make_pipeline_layout(c.parallel, train.model.block_count(), train.batch,
                                       train.microbatches, world_size());
    ASSERT_TRUE(layout.ok()) << c.name << ": " << layout.status().message();
    auto plan = predict_layout(train, profile_, topology_, *layout, c.offload);
    ASSERT_TRUE(plan.ok()) << c.name << ": " << plan.status().message();
    plan->receive_lookahead = receive_lookahead();
    auto predicted = sched::predict(profile_, topology_, *plan);
    ASSERT_TRUE(predicted.ok()) << c.name << ": " << predicted.status().message();
    double step_s = 0;
    auto measured = measured_ranks(train, *layout, c.offload, MPI_COMM_WORLD, &step_s);
    ASSERT_TRUE(measured.ok()) << c.name << ": " << measured.status().message();
    if (world_rank() != 0) continue;
    std::printf("memory model: %-20s step %.3f s\n", c.name.c_str(), step_s);
    for (std::size_t r = 0; r < measured->size(); ++r) {
      const MeasuredRank& rank = (*measured)[r];
      // Replicas share their pipeline's prediction.
      const auto& peaks = predicted->peak_memory_bytes;
      const std::int64_t want = rank.peak, got = peaks[r % peaks.size()];
      std::printf("memory model: %-20s rank %zu predicted %8s MiB measured %8s MiB (%+.1f%%), "
                  "a slot %s MiB\n",
                  c.name.c_str(), r, mib(got).c_str(), mib(want).c_str(),
                  100.0 * (static_cast<double>(got) / static_cast<double>(want) - 1),
                  mib(rank.slot).c_str());
      const bool offloads = c.offload.tier != OffloadTier::none;
      EXPECT_GE(static_cast<double>(got),
                kShort * static_cast<double>(want) - (offloads ? 2 * rank.slot : 0))
          << c.name << " rank " << r;
      EXPECT_LE(static_cast<double>(got),
                std::max(kSlack * static_cast<double>(want),
                         static_cast<double>(want + (rank.forward_only ? rank.slot : 0)) / kShort))
          << c.name << " rank " << r;
    }
  }
}

// Plan at a cap 10% under the uncapped plan's peak (offload allowed), then run that plan
// with the cap enforced by the ledger: it trains, and every rank stays under the cap. The
// profile is this test's own, taken after the first test's runs left the kernels' reusable
// scratch allocated; it must count that scratch all the same (it once did not, planned
// 4 MiB short, and a loaded run hit the cap).
TEST_F(MemoryModelTest, APlanMadeUnderACapRunsUnderIt) {
  sched::PlanRequest request;
  request.profile = profile_;
  request.topology = topology_;
  request.global_batch = settings_.batch;
  request.offload.choose = true;
  request.receive_lookahead = receive_lookahead();
  auto free_plan = sched::make_plan(request);
  ASSERT_TRUE(free_plan.ok()) << free_plan.status().message();
  const std::int64_t free_peak = *std::max_element(free_plan->peak_memory_bytes.begin(),
                                                   free_plan->peak_memory_bytes.end());
  request.memory_cap_bytes = free_peak * 9 / 10;
  auto plan = sched::make_plan(request);
  ASSERT_TRUE(plan.ok()) << plan.status().message();

  PipelineLayout layout;
  layout.schedule = plan->schedule;
  layout.pipeline_ranks = plan->pipeline_ranks;
  layout.ranks_per_stage = plan->ranks_per_stage();
  layout.replicas = plan->replicas;
  layout.chunks = plan->chunks;
  layout.microbatches = plan->microbatches;
  layout.microbatch_samples = plan->microbatch_samples;
  for (const sched::StageRange& r : plan->stages) layout.stages.push_back({r.first, r.last});
  OffloadConfig offload;
  offload.tier = runtime_tier(plan->offload.tier);
  offload.keep = plan->offload.keep;
  offload.lookahead = plan->offload.lookahead;
  TrainSettings train = settings_;
  train.microbatches = plan->microbatches * plan->replicas;
  train.memory_cap = static_cast<std::size_t>(*request.memory_cap_bytes);
  auto ordered = communicator_in_plan_order(MPI_COMM_WORLD, plan->world_rank);
  ASSERT_TRUE(ordered.ok()) << ordered.status().message();
  auto measured = measured_ranks(train, layout, offload, *ordered);
  MPI_Comm comm = *ordered;
  MPI_Comm_free(&comm);
  ASSERT_TRUE(measured.ok()) << plan->explanation << "\n" << measured.status().message();
  if (world_rank() != 0) return;
  std::printf("memory model: cap %s MiB (uncapped plan's peak %s MiB), plan:\n%s\n",
              mib(*request.memory_cap_bytes).c_str(), mib(free_peak).c_str(),
              plan->explanation.c_str());
  for (std::size_t r = 0; r < measured->size(); ++r) {
    const std::int64_t predicted = plan->peak_memory_bytes[r % plan->peak_memory_bytes.size()];
    std::printf("memory model: capped plan rank %zu predicted %s MiB measured %s MiB\n", r,
                mib(predicted).c_str(), mib((*measured)[r].peak).c_str());
    EXPECT_LE((*measured)[r].peak, *request.memory_cap_bytes) << "rank " << r;
    EXPECT_GE(static_cast<double>(predicted), kShort * static_cast<double>((*measured)[r].peak))
        << "rank " << r;
  }
}

}  // namespace
}  // namespace spw
