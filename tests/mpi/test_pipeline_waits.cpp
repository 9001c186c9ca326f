// What a pipeline rank does while it waits for a message: it zeroes the gradients of the
// step's coming weight gradients there instead of in the chunk's first W.
#include <chrono>
#include <thread>

#include "tests/mpi/pipeline_test_support.hpp"

namespace spw {
namespace {

// Rank 0 sleeps before each step, so rank 1 reaches its first receive long before the
// activation does, every step: its gradients must be zeroed inside that wait, before its
// first W, and the run must still give the trainer's bits.
TEST(PipelineWaits, ARankZeroesItsGradientsWhileItWaitsAndKeepsTheTrainersBits) {
  const int rank = world_rank();
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, rank < 2 ? 0 : MPI_UNDEFINED, rank, &comm);
  if (comm == MPI_COMM_NULL) return;
  const TrainSettings train = tiny_gpt(4);
  ParallelConfig parallel;
  parallel.stages.form = StagesSpec::Form::count;
  parallel.stages.count = 2;
  parallel.schedule = ScheduleKind::one_f_one_b;
  auto layout = make_pipeline_layout(parallel, train.model.block_count(), train.batch,
                                     train.microbatches, 2);
  ASSERT_TRUE(layout.ok()) << layout.status().message();
  PipelineSettings settings;
  settings.train = train;
  settings.layout = *layout;
  settings.trace_first_step = 1;
  settings.trace_steps = kSteps;
  auto executor = PipelineExecutor::create(settings, comm);
  ASSERT_TRUE(executor.ok()) << executor.status().message();
  for (int i = 0; i < kSteps; ++i) {
    if ((*executor)->pipeline_rank() == 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
    StepResult step;
    const Status status = (*executor)->run_step(step);
    if (!status.ok()) {
      std::fprintf(stderr, "rank %d failed mid-run: %s\n", rank, status.message().c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }

  if ((*executor)->pipeline_rank() == 1) {
    for (int step = 1; step <= kSteps; ++step) {
      const TraceEvent* zeroing = nullptr;
      const TraceEvent* first_w = nullptr;
      for (const TraceEvent& e : (*executor)->trace_events()) {
        if (e.step != step) continue;
        if (e.zeroing_grads) {
          EXPECT_EQ(zeroing, nullptr) << "step " << step << ": zeroed in two pieces";
          zeroing = &e;
        } else if (e.instruction.op == sched::Op::backward_weight && first_w == nullptr) {
          first_w = &e;
        }
      }
      ASSERT_NE(zeroing, nullptr) << "step " << step << ": no zeroing while waiting";
      ASSERT_NE(first_w, nullptr) << "step " << step;
      EXPECT_EQ(zeroing->instruction.chunk, 0) << "step " << step;
      EXPECT_EQ(zeroing->track, TraceTrack::compute) << "step " << step;
      EXPECT_LE(zeroing->end_s, first_w->start_s) << "step " << step;
    }
  }
  auto weights = (*executor)->gather_parameters(0);
  ASSERT_TRUE(weights.ok()) << weights.status().message();
  MPI_Comm_free(&comm);
  if (rank != 0) return;
  const Outcome ref = reference(train);
  ASSERT_TRUE(ref.ok) << ref.error;
  EXPECT_EQ(*weights, ref.weights);
}

}  // namespace
}  // namespace spw
