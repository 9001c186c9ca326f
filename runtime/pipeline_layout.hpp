// How a job's ranks are arranged: P pipeline ranks holding v chunks each (S = P·v stages,
// each a contiguous block range), times R data-parallel replicas of that pipeline.
//
// World rank w is pipeline rank w % P of replica w / P, so the ranks of one pipeline are
// neighbours in the world (and, with the usual block placement of ranks, on one node).
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
  int pipeline_ranks = 1;         // P
  int replicas = 1;               // R
  int chunks = 1;                 // v
  int microbatches = 1;           // m, per replica and step
  std::int64_t microbatch_samples = 1;
  std::string schedule = "1f1b";  // a partition/generators.hpp name
  std::vector<StageRange> stages; // [global stage] -> its blocks; stage s on pipeline rank s % P

  int world_size() const { return pipeline_ranks * replicas; }
  int stage_count() const { return static_cast<int>(stages.size()); }
  int pipeline_rank_of(int world_rank) const { return world_rank % pipeline_ranks; }
  int replica_of(int world_rank) const { return world_rank / pipeline_ranks; }
  // "2 stages x 1 replica, 1f1b, 4 microbatches of 2"
  std::string describe() const;
};

// The layout `parallel` asks for, checked against the model's block count, the batch and the
// number of ranks the job was launched with. Every error is invalid_argument naming the keys
// involved and what would fix it; all ranks compute the same answer.
//   stages = "auto": one stage per pipeline rank (world / replicas), blocks split evenly
//   until the planner chooses; a count: blocks split evenly; ranges: as given.
Result<PipelineLayout> make_pipeline_layout(const ParallelConfig& parallel,
                                            std::int64_t block_count, std::int64_t batch,
                                            std::int64_t microbatches, int world_size);

// `count` contiguous ranges over `block_count` blocks whose sizes differ by at most one,
// the larger ones last (the embedding, the lightest block, sits in the first stage).
std::vector<StageRange> even_stage_ranges(std::int64_t block_count, int count);

std::string schedule_generator_name(ScheduleKind kind);

}  // namespace spw
