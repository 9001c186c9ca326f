// What the planner knows about a model: per block (a contiguous unit the planner never
// splits, e.g. one transformer layer) the time of each pass and the bytes it holds, measured
// on one rank for one microbatch of `microbatch_samples` samples with `threads` threads.
// `spillway profile` fills this on the node; the planner reads it as profile.json.
//
// Scaling assumption: the planner picks its own microbatch size, and scales every time and
// the per-microbatch bytes (stash, activation, backward, workspace but its bounded part)
// linearly in samples;
// scratch only up, by the growth measured at twice the samples (kernels' scratch mostly
// depends on threads, weights and sequence length, not on the batch); parameter, gradient and
// optimizer-state bytes do not depend on the batch.
// Proportional times hold when a block's passes are large GEMMs; on smaller microbatches the
// GEMMs run below that rate (on the Xeon VM gpt-m's layers took 1.06-1.21x half their
// 2-sample time on one sample), so the passes are also timed on one sample, and times below
// microbatch_samples lie on the line through the two (BlockProfile::one_sample).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/status.hpp"

namespace spw::sched {

// The bytes are what the ledger sees the block's passes allocate (runtime/profiler.hpp); the
// planner adds a stage's input and its blocks' outputs and their gradients to them
// (planner_cost.hpp), as the executor's microbatch slots hold them.
struct PassSeconds {
  double forward_s = 0;
  double backward_input_s = 0;
  double backward_weight_s = 0;
};

struct BlockProfile {
  std::string name;
  double forward_s = 0;
  double backward_input_s = 0;   // gradient w.r.t. the block's input
  double backward_weight_s = 0;  // gradient w.r.t. its parameters
  // Per microbatch: what its forward keeps for the backward (BlockState::saved).
  std::int64_t stash_bytes = 0;
  std::int64_t activation_bytes = 0;  // its output, what crosses a stage boundary after it
  std::int64_t parameter_bytes = 0;
  std::int64_t gradient_bytes = 0;
  std::int64_t optimizer_state_bytes = 0;
  // Per microbatch: what its backward-input keeps for the backward-weight (BlockState::grads).
  std::int64_t backward_bytes = 0;
  // Held by a rank running the block's backwards for the whole run (the block's reusable
  // buffers, as large as one microbatch needs), and the most one of its passes allocates
  // and frees again, kernels' process-wide buffers included.
  std::int64_t workspace_bytes = 0;
  std::int64_t scratch_bytes = 0;
  // How much scratch_bytes grew when the block ran a microbatch twice as large: the planner
  // adds this much per microbatch_samples more samples. Most scratch is per thread or per
  // weight and does not grow; some (LayerNorm's partial sums) does, up to a bound. Absent
  // (profiles written before it was measured): all of scratch_bytes is taken to grow.
  std::optional<std::int64_t> scratch_growth_bytes = std::nullopt;
  // Of workspace_bytes, the part that grows with the microbatch only up to a bound: per
  // sample, and at most (the chunked GPT head's buffer holds min(rows, head_chunk_rows)
  // rows: scaled linearly from a profile of 2,048 rows, a plan of 1,024 would count half the
  // buffer it needs whole). The planner scales the rest linearly. 0 and 0: none.
  std::int64_t bounded_workspace_per_sample = 0;
  std::int64_t bounded_workspace_most = 0;
  // The same passes on a microbatch of one sample, measured where microbatch_samples > 1.
  // Absent there in profiles written before it was measured: times then scale
  // proportionally all the way down.
  std::optional<PassSeconds> one_sample = std::nullopt;
};

struct ModelProfile {
  // What was measured, e.g. "gpt layers=8 d_model=256 heads=8 seq=128 vocab=256": a profile
  // is used only for the model it names (check_profile_matches).
  std::string model;
  std::vector<BlockProfile> blocks;
  std::int64_t microbatch_samples = 1;  // the samples each measurement above processed
  int threads = 1;                      // per rank, while measuring
  // Where it was measured and with which BLIS kernels ("skx", "zen3", "generic", ...; BLIS
  // picks them per CPU, or spillway does where BLIS does not know the CPU): the times hold
  // for nodes like that one. "" when unknown (profiles written before they were recorded).
  std::string host;
  std::string blas_kernels;
  // One optimizer step over all parameters; a rank holding a fraction of them takes that
  // fraction. Does not scale with samples.
  double optimizer_step_s = 0;
};

// How it was measured, for people: "2 thread(s) with BLIS's skx kernels on node17", leaving
// out what is unknown.
std::string measured_with(const ModelProfile& profile);

// The bounded part of `block`'s workspace on a microbatch of `samples`.
std::int64_t bounded_workspace_bytes(const BlockProfile& block, std::int64_t samples);

// invalid_argument naming the first bad value: no blocks, microbatch_samples or threads < 1,
// a time that is negative or not finite, a negative byte count.
Status check_profile(const ModelProfile& profile);

// A profile read from a file describes the job at hand: the same model (its `model` text and
// block names) and the same microbatch size, since times and stash bytes were measured for
// exactly those. invalid_argument naming `source`, what differs and how to get a fitting one.
Status check_profile_matches(const ModelProfile& profile, const std::string& model,
                             const std::vector<std::string>& block_names,
                             std::int64_t microbatch_samples, const std::string& source);

// One profile from several measured at once (every rank of a job profiling the same model
// concurrently, so each figure is taken under the load training puts on the node): per
// block and pass the median of the measured times, the median optimizer step and the largest
// scratch. The profiles must agree on everything but times, scratch and threads (ranks on
// nodes with more cores may have more; the result keeps the first profile's);
// invalid_argument naming what differs.
Result<ModelProfile> median_profile(const std::vector<ModelProfile>& measured);

// The profile.json format: {"version": 2, "model": "...", "microbatch_samples": 4,
// "threads": 2, "host": "node17", "blas_kernels": "skx", "optimizer_step_s": 0.01, "blocks":
// [{"name": "embed", "forward_s": ..., every field of BlockProfile}]}. Every block key is
// required; "model", "host", "blas_kernels" and "optimizer_step_s" are optional. Version 1 (no
// "version" key) counted a block's saved state, backward buffers and output with its gradient as
// one stash and had no workspace or scratch: it is refused with a message to profile again.
inline constexpr int kProfileVersion = 2;
std::string profile_to_json(const ModelProfile& profile);
// `source` names the text in errors (a path, or "profile"); the result is also checked.
Result<ModelProfile> profile_from_json(std::string_view text, const std::string& source);

Result<ModelProfile> read_profile(const std::string& path);
Status write_profile(const std::string& path, const ModelProfile& profile);

}  // namespace spw::sched
