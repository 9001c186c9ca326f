// How a job's ranks are arranged: P pipeline ranks holding v chunks each (S = P·v stages,
// each a contiguous block range), times R data-parallel replicas of that pipeline. Under
// PipeFB (parallel.layout = "pipefb") every stage has two ranks, a forward rank and a
// backward rank, so one pipeline spans 2P ranks: the schedule's list k is pipeline rank k
// (forward ranks 0..P-1, backward ranks P..2P-1).
//
// World rank w is pipeline rank w % ranks_in_pipeline() of replica w / ranks_in_pipeline(),
// so the ranks of one pipeline are neighbours in the world (and, with the usual block
// placement of ranks, on one node).
//
// train.microbatches counts the microbatches of the whole batch; each replica runs
// microbatches / R of them. The same job file therefore computes the same microbatches,
// and so the same math, whatever the parallel layout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/status.hpp"
#include "runtime/job_config.hpp"

namespace spw {

struct PipelineLayout {
  int pipeline_ranks = 1;         // P: stage positions (ranks, unless ranks_per_stage > 1)
  int ranks_per_stage = 1;        // 2 under PipeFB: a forward and a backward rank
  int replicas = 1;               // R
  int chunks = 1;                 // v
  int microbatches = 1;           // m, per replica and step
  std::int64_t microbatch_samples = 1;
  std::string schedule = "1f1b";  // a partition/generators.hpp name
  std::vector<StageRange> stages; // [global stage] -> its blocks; stage s on pipeline rank s % P

  int ranks_in_pipeline() const { return pipeline_ranks * ranks_per_stage; }
  int world_size() const { return ranks_in_pipeline() * replicas; }
  int stage_count() const { return static_cast<int>(stages.size()); }
  int pipeline_rank_of(int world_rank) const { return world_rank % ranks_in_pipeline(); }
  int replica_of(int world_rank) const { return world_rank / ranks_in_pipeline(); }
  // "2 stages x 1 replica, 1f1b, 4 microbatches of 2"
  std::string describe() const;
};

// The layout `parallel` asks for, checked against the model's block count, the batch and the
// number of ranks the job was launched with. Every error is invalid_argument naming the keys
// involved and what would fix it; all ranks compute the same answer.
//   stages = "auto": one stage per pipeline rank (world / replicas, halved under PipeFB),
//   blocks split evenly until the planner chooses; a count: blocks split evenly; ranges: as
//   given. layout = "pipefb" runs the "pipefb" generator (parallel.schedule does not apply)
//   with one chunk per rank; "auto" and "classic" run parallel.schedule on one rank per stage
//   (the planner may still pick PipeFB for "auto" when it plans).
Result<PipelineLayout> make_pipeline_layout(const ParallelConfig& parallel,
                                            std::int64_t block_count, std::int64_t batch,
                                            std::int64_t microbatches, int world_size);

// `count` contiguous ranges over `block_count` blocks whose sizes differ by at most one,
// the larger ones last (the embedding, the lightest block, sits in the first stage).
std::vector<StageRange> even_stage_ranges(std::int64_t block_count, int count);

std::string schedule_generator_name(ScheduleKind kind);

}  // namespace spw
