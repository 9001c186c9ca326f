#include "runtime/pipeline_layout.hpp"

namespace spw {
namespace {

std::string plural(std::int64_t n, const std::string& word) {
  if (n == 1) return "1 " + word;
  return std::to_string(n) + " " + word + (word.back() == 'h' ? "es" : "s");
}

Status fail(const std::string& message) { return error(StatusCode::invalid_argument, message); }

}  // namespace

std::string schedule_generator_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::gpipe: return "gpipe";
    case ScheduleKind::one_f_one_b: return "1f1b";
    case ScheduleKind::interleaved: return "interleaved-1f1b";
    case ScheduleKind::zb_h1: return "zb-h1";
  }
  return "1f1b";
}

std::vector<StageRange> even_stage_ranges(std::int64_t block_count, int count) {
  std::vector<StageRange> ranges;
  const std::int64_t base = block_count / count;
  const std::int64_t larger = block_count % count;
  int first = 0;
  for (int s = 0; s < count; ++s) {
    const std::int64_t size = base + (s >= count - larger ? 1 : 0);
    ranges.push_back({first, first + static_cast<int>(size) - 1});
    first += static_cast<int>(size);
  }
  return ranges;
}

std::string PipelineLayout::describe() const {
  std::string stages_text = plural(stage_count(), "stage");
  if (chunks > 1) {
    stages_text = plural(pipeline_ranks, "rank") + " x " + std::to_string(chunks) +
                  " chunks = " + stages_text;
  }
  if (ranks_per_stage > 1) {
    stages_text += " on " + plural(ranks_in_pipeline(), "rank") + " (forward and backward apart)";
  }
  return stages_text + " x " + plural(replicas, "replica") + ", " + schedule + ", " +
         plural(microbatches, "microbatch") + " of " + std::to_string(microbatch_samples) +
         " per replica";
}

Result<PipelineLayout> make_pipeline_layout(const ParallelConfig& parallel,
                                            std::int64_t block_count, std::int64_t batch,
                                            std::int64_t microbatches, int world_size) {
  PipelineLayout layout;
  layout.replicas = parallel.replicas;
  layout.chunks = parallel.chunks;
  layout.schedule = schedule_generator_name(parallel.schedule);
  const bool pipefb = parallel.layout == Layout::pipefb;
  if (pipefb) {
    if (parallel.chunks != 1) {
      return fail("parallel.layout = \"pipefb\" runs one chunk per rank: set parallel.chunks = 1");
    }
    layout.schedule = "pipefb";
    layout.ranks_per_stage = 2;
  }
  const int v = parallel.chunks;
  const int replicas = parallel.replicas;

  if (world_size % replicas != 0) {
    return fail("parallel.replicas = " + std::to_string(replicas) + " does not divide the " +
                plural(world_size, "rank") + " the job was launched with: launch a multiple of " +
                std::to_string(replicas) + " ranks or change parallel.replicas");
  }
  int stage_count = 0;
  switch (parallel.stages.form) {
    case StagesSpec::Form::automatic:
      stage_count = world_size / replicas / layout.ranks_per_stage * v;
      if (stage_count < 1) {
        return fail("parallel.layout = \"pipefb\" needs 2 ranks per stage (a forward and a "
                    "backward rank) per replica: launch with mpirun -n " +
                    std::to_string(2 * replicas));
      }
      break;
    case StagesSpec::Form::count: stage_count = parallel.stages.count; break;
    case StagesSpec::Form::ranges:
      stage_count = static_cast<int>(parallel.stages.ranges.size());
      break;
  }
  if (stage_count > block_count) {
    return fail("parallel.stages asks for " + plural(stage_count, "stage") +
                " but the model has only " + plural(block_count, "block") +
                " to cut them from: use at most " + std::to_string(block_count) + " stages");
  }
  if (stage_count % v != 0) {
    return fail(plural(stage_count, "stage") + " cannot be spread as parallel.chunks = " +
                std::to_string(v) + " chunks per rank: make parallel.stages a multiple of " +
                std::to_string(v));
  }
  layout.pipeline_ranks = stage_count / v;
  if (layout.world_size() != world_size) {
    if (pipefb) {
      return fail(plural(stage_count, "stage") + " x 2 ranks (forward and backward, PipeFB) x " +
                  plural(replicas, "replica") + " need " + plural(layout.world_size(), "rank") +
                  ", but the job was launched with " + std::to_string(world_size) +
                  ": launch with mpirun -n " + std::to_string(layout.world_size()) +
                  " or change parallel.stages / parallel.replicas / parallel.layout");
    }
    return fail(plural(stage_count, "stage") + " (" + std::to_string(v) + " per rank) x " +
                plural(replicas, "replica") + " need " + plural(layout.world_size(), "rank") +
                ", but the job was launched with " + std::to_string(world_size) +
                ": launch with mpirun -n " + std::to_string(layout.world_size()) +
                " or change parallel.stages / parallel.replicas");
  }

  if (parallel.stages.form == StagesSpec::Form::ranges) {
    layout.stages = parallel.stages.ranges;
    // The reader already checked that ranges start at 0 and follow each other.
    const int last = layout.stages.back().last;
    if (last != block_count - 1) {
      return fail("parallel.stages ranges end at block " + std::to_string(last) +
                  " but the model's last block is " + std::to_string(block_count - 1) +
                  ": every block needs a stage, so the last range must end at " +
                  std::to_string(block_count - 1));
    }
  } else {
    layout.stages = even_stage_ranges(block_count, stage_count);
  }

  const bool interleaved = !pipefb && parallel.schedule == ScheduleKind::interleaved;
  if (interleaved && v < 2) {
    return fail("parallel.schedule = \"interleaved\" needs parallel.chunks >= 2 (chunks per "
                "rank); with one chunk use \"1f1b\"");
  }
  if (!interleaved && !pipefb && v != 1) {
    return fail("parallel.schedule = \"" + std::string(to_string(parallel.schedule)) +
                "\" runs one chunk per rank: set parallel.chunks = 1 or use \"interleaved\"");
  }
  if (microbatches % replicas != 0) {
    return fail("train.microbatches = " + std::to_string(microbatches) +
                " must be a multiple of parallel.replicas = " + std::to_string(replicas) +
                " (each replica runs an equal share of the batch's microbatches)");
  }
  if (batch % microbatches != 0) {
    return fail("train.batch = " + std::to_string(batch) + " must be a multiple of " +
                "train.microbatches = " + std::to_string(microbatches));
  }
  layout.microbatches = static_cast<int>(microbatches / replicas);
  layout.microbatch_samples = batch / microbatches;
  if (interleaved && layout.microbatches % layout.pipeline_ranks != 0) {
    return fail("the interleaved schedule needs the microbatches per replica (" +
                std::to_string(layout.microbatches) + ") to be a multiple of the pipeline's " +
                plural(layout.pipeline_ranks, "rank") + ": change train.microbatches");
  }
  return layout;
}

}  // namespace spw
