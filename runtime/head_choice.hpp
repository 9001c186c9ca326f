// model.head_chunk_rows = "auto": whether a gpt's head keeps each microbatch's logits or
// computes them kAutoHeadChunkRows rows at a time (gpt_blocks.hpp) is the planner's to
// choose. The chunked head stashes no logits ([rows, vocab] floats a microbatch in flight),
// so it fits where the whole head does not, at about the same speed; it runs only in classic
// layouts (its forward adds to its weight gradient, which PipeFB keeps on another rank).
// The planner plans the job both ways, from the profile of the job's model and that profile
// with its head's entry measured on a one-layer probe with the head chunked, and keeps the
// plan predicted faster among those that fit memory.cap.
#pragma once

#include <cstdint>

#include "kernels/status.hpp"
#include "partition/profile.hpp"
#include "partition/rank_topology.hpp"
#include "runtime/auto_plan.hpp"
#include "runtime/trainer.hpp"

namespace spw {

// The rows a chunk when the planner chunks the head: 16 of the 64-row blocks whose loss sums
// are bit-identical to the whole head's, and at GPT-2's vocabulary a 206 MB buffer, where
// 256-row chunks ran 10% slower (README, "With GPT-2's vocabulary").
inline constexpr std::int64_t kAutoHeadChunkRows = 1024;

// How much faster the chunked head's plan must be predicted to be kept over a whole head's
// that fits too: two profiles of the same job differ by a few percent (gpt2v under a 600 MiB
// cap: chunked 1.211 against whole 1.221 s in one run, 1.285 against 1.237 in the next), and
// the whole head keeps its logits for whoever reads them.
inline constexpr double kHeadChoiceMargin = 0.02;

// settings.head_chunk_auto on a gpt.
bool plans_head_chunks(const TrainSettings& settings);

// What the choice profiles the chunked head with: the job's settings, its gpt with one layer,
// no cuts, the head chunked at kAutoHeadChunkRows.
TrainSettings chunked_head_probe(const TrainSettings& settings);

// `whole` (a profile of profiled_model(settings)) with the head's entry of `probe` (a
// profile of chunked_head_probe(settings)), describing profiled_model(settings) with its
// head chunked. invalid_argument when either lacks a block named "head".
Result<sched::ModelProfile> with_chunked_head(const TrainSettings& settings,
                                              const sched::ModelProfile& whole,
                                              const sched::ModelProfile& probe);

// plan_model with the head whole (on `whole`) and, where plans_head_chunks, chunked (on
// `chunked`, from with_chunked_head, its plan classic): the chunked head's plan where only it
// fits or it is predicted kHeadChoiceMargin faster, else the whole head's, with
// ModelPlan::head_chunk_rows set and both predictions in its explanation.
// When neither fits, the error names both reasons; without plans_head_chunks, plan_model.
Result<ModelPlan> plan_model_and_head(const TrainSettings& settings,
                                      const sched::ModelProfile& whole,
                                      const sched::ModelProfile* chunked,
                                      const sched::RankTopology& topology,
                                      const sched::OffloadBandwidth& bandwidth);

// Writes the choice as the record's layout.head_chunk_rows (0: whole), which
// plan_from_record reads back into AutoPlan::head_chunk_rows; nothing unless
// plans_head_chunks.
void record_head_chunks(nlohmann::json& record, const TrainSettings& settings, std::int64_t rows);

}  // namespace spw
