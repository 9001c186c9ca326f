#include "runtime/profiler.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "kernels/blas_kernels.hpp"
#include "kernels/cache_eviction.hpp"
#include "kernels/memory_ledger.hpp"
#include "kernels/numa_allocator.hpp"
#include "kernels/threading.hpp"
#include "runtime/parameter_store.hpp"
#include "runtime/progress.hpp"

namespace spw {
namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

std::int64_t ledger_bytes() {
  return static_cast<std::int64_t>(MemoryLedger::process().current_total());
}

// Runs `pass` warmup + runs times, appending the timed runs to `times`; `cool` runs before
// each timed one, untimed. `scratch` grows to the most any run allocated above what it left
// allocated.
template <class Pass, class Cool>
Status time_pass(int warmup, int runs, std::vector<double>& times, std::int64_t& scratch,
                 Pass&& pass, Cool&& cool) {
  MemoryLedger& ledger = MemoryLedger::process();
  for (int i = 0; i < warmup + runs; ++i) {
    if (i >= warmup) cool();
    ledger.reset_peaks();
    const auto start = std::chrono::steady_clock::now();
    SPW_TRY(pass());
    if (i >= warmup) times.push_back(seconds_since(start));
    scratch = std::max(scratch,
                       static_cast<std::int64_t>(ledger.peak_total() - ledger.current_total()));
  }
  return Status::success();
}

// The first `samples` samples of the job's data as one microbatch, into `buffers`.
Result<MicrobatchData> profiled_microbatch(BatchSource& data, const ModelSpec& spec,
                                           std::int64_t samples, MicrobatchBuffers& buffers) {
  SPW_TRY(data.fill(0, 0, samples, samples, buffers));
  MicrobatchData mb = buffers.view(samples, spec.positions_per_sample());
  mb.grad_scale = static_cast<float>(1.0 / static_cast<double>(mb.rows()));
  mb.backward_follows = true;  // its passes are timed as training runs them
  return mb;
}

// The first block of a kind, which is measured for all `blocks` blocks of that kind.
struct MeasuredKind {
  std::size_t block = 0;
  int blocks = 1;
};

// A kind that stands for several blocks gets the timed runs that many blocks would have had,
// up to this many blocks' worth: its median then rests on as many runs as a shallow model's
// sum of medians did, and a deep model still costs a few blocks.
constexpr int kMostBlocksOfRunsPerKind = 4;

// Every timed run of one block's passes and optimizer step, over all sweeps.
struct BlockTimes {
  std::vector<double> forward, backward_input, backward_weight, step;
};

double optimizer_state_per_parameter_byte(const OptimizerSettings& optimizer) {
  if (optimizer.kind == "adamw") return 2;
  return optimizer.momentum != 0 ? 1 : 0;
}

// One sweep's measurements of block `b`: built afresh (blocks are built, measured and freed
// one at a time), its passes and its optimizer step timed `runs` times after `warmup`; its
// bytes into `p`. `process_start` is what the ledger held before any block was built:
// kernels' process-wide buffers (thread_local scratch) are what it holds beyond that once
// the block is gone.
Status measure_block(const TrainSettings& settings, const MicrobatchData& mb, std::int64_t b,
                     int warmup, int runs, std::int64_t process_start, sched::BlockProfile& p,
                     BlockTimes& times) {
  const ModelSpec& spec = settings.model;
  SPW_ASSIGN_OR_RETURN(auto model, Model::build(spec, b, b));
  SPW_TRY(model->init_parameters(settings.seed));
  Block& block = model->block(0);
  // Inputs and incoming gradients need realistic magnitudes, not their exact values.
  Tensor input;
  if (b > 0) {
    SPW_ASSIGN_OR_RETURN(input, Tensor::zeros(spec.activation_shape(b - 1, mb),
                                              MemoryCategory::workspace));
    fill_normal(input, 1.0, settings.seed, "profile.input");
  }
  const Shape out_shape = block.output_shape(mb);
  Tensor output, doutput, dinput;
  const bool hands_on = out_shape.rank() > 0;  // the loss block hands on nothing
  if (hands_on) {
    SPW_ASSIGN_OR_RETURN(output, Tensor::zeros(out_shape, MemoryCategory::workspace));
    SPW_ASSIGN_OR_RETURN(doutput, Tensor::zeros(out_shape, MemoryCategory::workspace));
    fill_normal(doutput, 1e-3, settings.seed, "profile.doutput");
  }
  if (b > 0) {
    SPW_ASSIGN_OR_RETURN(dinput, Tensor::zeros(input.shape(), MemoryCategory::workspace));
  }
  const Tensor* in = b > 0 ? &input : nullptr;
  Tensor* out = hands_on ? &output : nullptr;
  const Tensor* dout = hands_on ? &doutput : nullptr;
  Tensor* din = b > 0 ? &dinput : nullptr;
  BlockState state;
  double loss = 0;

  // Each timed pass finds the block's memory as training leaves it, out of the caches: its
  // parameters, gradients and saved state, and for the backward the block's input from the
  // forward long before, and the buffers a pass writes. Between two passes of a block the
  // rest of the model streams through. Only what the block just received stays where its
  // neighbour wrote it: the forward's input, the backward's output gradient. Timed back to
  // back instead, with all of it in L2 and L3, gpt-s's passes (2 samples) took 712-727 ms
  // a step of 8 microbatches where training one rank took 816-848 (the pipeline's stages ran
  // 12-15% over such a plan); with its memory evicted 802-819 ms, and its profile 2.9 ->
  // 3.15 s. gpt-m's passes, whose operands overflow L2 anyway, rose 3.6%.
  const std::vector<NamedParameter> parameters = model->parameters();
  const auto evict_parameters = [&parameters] {
    for (const NamedParameter& param : parameters) {
      evict_from_caches(*param.value);
      if (param.grad != nullptr) evict_from_caches(*param.grad);
    }
  };
  const auto evict_block = [&](std::initializer_list<const Tensor*> also) {
    evict_parameters();
    for (const Stash* kept : {&state.saved, &state.grads}) {
      for (std::size_t k = 0; k < kept->slot_count(); ++k) evict_from_caches(kept->at(k));
    }
    for (const Tensor* t : also) {
      if (t != nullptr) evict_from_caches(*t);
    }
  };
  std::int64_t scratch = 0;
  SPW_TRY(time_pass(
      warmup, runs, times.forward, scratch,
      [&] { return block.forward(mb, in, out, state, &loss); }, [&] { evict_block({out}); }));
  SPW_TRY(time_pass(
      warmup, runs, times.backward_input, scratch,
      [&] { return block.backward_input(mb, in, dout, din, state); },
      [&] { evict_block({in, din}); }));
  SPW_TRY(time_pass(
      warmup, runs, times.backward_weight, scratch,
      [&] { return block.backward_weight(mb, in, dout, state); }, [&] { evict_block({in}); }));
  // Per microbatch the executor keeps this block's saved state from F to W and its
  // backward buffers from B to W; the planner adds outputs and their gradients.
  p.stash_bytes = static_cast<std::int64_t>(state.saved.bytes());
  p.backward_bytes = static_cast<std::int64_t>(state.grads.bytes());
  p.activation_bytes = hands_on ? out_shape.numel() * 4 : 0;
  p.parameter_bytes = 0;
  std::int64_t gradient_bytes = 0;
  for (const auto& param : parameters) {
    p.parameter_bytes += static_cast<std::int64_t>(param.value->bytes());
    if (param.grad != nullptr) gradient_bytes += static_cast<std::int64_t>(param.grad->bytes());
  }
  p.gradient_bytes = p.parameter_bytes;
  p.optimizer_state_bytes = static_cast<std::int64_t>(
      optimizer_state_per_parameter_byte(settings.optimizer) *
      static_cast<double>(p.parameter_bytes));
  {
    SPW_ASSIGN_OR_RETURN(auto optimizer,
                         make_optimizer(settings.optimizer, parameters));
    // A step comes once all microbatches are through: everything it touches is cold.
    const auto evict_step = [&] {
      evict_parameters();
      for (std::size_t i = 0; i < parameters.size(); ++i) {
        for (std::size_t k = 0; k < optimizer->state_names().size(); ++k) {
          evict_from_caches(optimizer->state(i, k));
        }
      }
    };
    std::int64_t step_scratch = 0;
    SPW_TRY(time_pass(warmup, runs, times.step, step_scratch, [&] { return optimizer->step(); },
                      evict_step));
  }
  const Block::RowBoundedBytes bounded = block.row_bounded_workspace();
  p.bounded_workspace_per_sample = bounded.per_row * spec.positions_per_sample();
  p.bounded_workspace_most = bounded.most;
  // What the block holds without its state, its parameters and the profiler's tensors is
  // its own, kept across microbatches: its workspace.
  state.release();
  for (Tensor* t : {&input, &output, &doutput, &dinput}) *t = Tensor();
  const std::int64_t with_block = ledger_bytes();
  model.reset();
  const std::int64_t after_block = ledger_bytes();
  p.workspace_bytes =
      std::max<std::int64_t>(0, with_block - after_block - p.parameter_bytes - gradient_bytes);
  // Process-wide kernel buffers grow to the largest any block needed so far: a rank holds
  // them once, so they count with the scratch (the rank adds its largest).
  p.scratch_bytes = std::max(p.scratch_bytes,
                             scratch + std::max<std::int64_t>(0, after_block - process_start));
  return Status::success();
}

// How much each block's scratch grows when its microbatch doubles: one untimed run of its
// passes at twice the samples, after the timed ones. The planner scales only that part with
// samples. The run leaves the kernels' reusable buffers at their larger sizes (they never
// shrink), which every later run in this process holds: each block's scratch counts that
// growth too. A run that does not fit under a memory cap leaves the growth unknown (the
// planner then scales all of the scratch, as it did before this was measured).
Status measure_scratch_growth(const TrainSettings& settings, BatchSource& data,
                              const ProfileOptions& options, std::int64_t process_start,
                              const std::vector<MeasuredKind>& kinds,
                              sched::ModelProfile& profile) {
  MicrobatchBuffers buffers;
  SPW_ASSIGN_OR_RETURN(const MicrobatchData mb,
                       profiled_microbatch(data, settings.model, 2 * options.microbatch_samples,
                                           buffers));
  const auto kept_before = static_cast<std::int64_t>(scratch_buffer_bytes());
  std::vector<std::int64_t> growth(profile.blocks.size());
  for (const MeasuredKind& kind : kinds) {
    const std::size_t b = kind.block;
    sched::BlockProfile twice;
    BlockTimes unused;
    const Status measured = measure_block(settings, mb, static_cast<std::int64_t>(b), 0, 1,
                                          process_start, twice, unused);
    if (measured.code() == StatusCode::memory_cap || measured.code() == StatusCode::out_of_memory) {
      return Status::success();  // the growth stays unmeasured, as with no room to measure it
    }
    SPW_TRY(measured);
    growth[b] = std::max<std::int64_t>(0, twice.scratch_bytes - profile.blocks[b].scratch_bytes);
  }
  const std::int64_t kept_growth =
      std::max<std::int64_t>(0, static_cast<std::int64_t>(scratch_buffer_bytes()) - kept_before);
  for (const MeasuredKind& kind : kinds) {
    const std::size_t b = kind.block;
    profile.blocks[b].scratch_bytes += kept_growth;
    profile.blocks[b].scratch_growth_bytes = growth[b];
  }
  return Status::success();
}

// The timed runs are spread over sweeps through all blocks rather than taken block after
// block, so a change in the node's load while profiling (other jobs, other ranks) reaches
// every block alike instead of making identical blocks look different.
Status time_blocks(const TrainSettings& settings, const MicrobatchData& mb,
                   const ProfileOptions& options, std::int64_t process_start,
                   const std::vector<MeasuredKind>& kinds, std::vector<sched::BlockProfile>& blocks,
                   std::vector<BlockTimes>& times) {
  const int sweeps = std::min(options.repeats, std::max(options.sweeps, 1));
  for (int sweep = 0; sweep < sweeps; ++sweep) {
    for (const MeasuredKind& kind : kinds) {
      const std::size_t b = kind.block;
      const int repeats = options.repeats * std::min(kind.blocks, kMostBlocksOfRunsPerKind);
      const int runs = repeats / sweeps + (sweep < repeats % sweeps ? 1 : 0);
      SPW_TRY(measure_block(settings, mb, static_cast<std::int64_t>(b), options.warmup, runs,
                            process_start, blocks[b], times[b]));
    }
  }
  return Status::success();
}

// The passes on a microbatch of one sample, for the planner's smaller microbatches: their
// GEMMs run below the profiled ones' rate (profile.hpp). Only the times are kept; the bytes
// scale with samples.
Status time_one_sample(const TrainSettings& settings, BatchSource& data,
                       const ProfileOptions& options, std::int64_t process_start,
                       const std::vector<MeasuredKind>& kinds, sched::ModelProfile& profile) {
  MicrobatchBuffers buffers;
  SPW_ASSIGN_OR_RETURN(const MicrobatchData mb,
                       profiled_microbatch(data, settings.model, 1, buffers));
  std::vector<sched::BlockProfile> unused(profile.blocks.size());
  std::vector<BlockTimes> times(profile.blocks.size());
  SPW_TRY(time_blocks(settings, mb, options, process_start, kinds, unused, times));
  for (const MeasuredKind& kind : kinds) {
    const std::size_t b = kind.block;
    profile.blocks[b].one_sample =
        sched::PassSeconds{median(times[b].forward), median(times[b].backward_input),
                           median(times[b].backward_weight)};
  }
  return Status::success();
}

// For each block, the first block of its kind (ModelSpec::block_kind): blocks of one kind
// run the same kernels on the same shapes, so only the first of each is measured and the
// others take its profile. A gpt's profile then costs its embedding, one layer and its head
// whatever its depth: a 100-layer gpt-s took 135 s to profile on 2 ranks when every layer
// was measured.
std::vector<std::size_t> first_of_each_kind(const ModelSpec& spec) {
  std::vector<std::size_t> first(static_cast<std::size_t>(spec.block_count()));
  std::map<std::string, std::size_t> seen;
  for (std::size_t b = 0; b < first.size(); ++b) {
    first[b] = seen.emplace(spec.block_kind(static_cast<std::int64_t>(b)), b).first->second;
  }
  return first;
}

// gethostname, not MPI's processor name: a profile may be taken without MPI started.
std::string host_name() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return "";
  return host;
}

}  // namespace

Result<sched::ModelProfile> profile_model(const TrainSettings& settings,
                                          const ProfileOptions& options) {
  if (options.microbatch_samples < 1 || options.repeats < 1 || options.warmup < 0) {
    return error(StatusCode::invalid_argument,
                 "profiling needs microbatch_samples >= 1, repeats >= 1 and warmup >= 0");
  }
  const ModelSpec& spec = settings.model;
  SPW_ASSIGN_OR_RETURN(auto data, open_batch_source(settings.data, spec, settings.seed));
  MicrobatchBuffers buffers;
  SPW_ASSIGN_OR_RETURN(const MicrobatchData mb,
                       profiled_microbatch(*data, spec, options.microbatch_samples, buffers));

  sched::ModelProfile profile;
  profile.model = spec.describe();
  profile.microbatch_samples = options.microbatch_samples;
  profile.threads = compute_threads();
  profile.host = host_name();
  if (const auto& kernels = blas::choose_kernels(); kernels.ok()) {
    profile.blas_kernels = kernels->kernels;
  }
  const std::vector<std::string> names = spec.block_names();
  const auto blocks = static_cast<std::size_t>(spec.block_count());
  profile.blocks.resize(blocks);
  std::vector<BlockTimes> times(blocks);
  // Without the kernels' reusable scratch an earlier run in this process left allocated:
  // the blocks' measurements then see it as theirs, as in a fresh process.
  const std::int64_t process_start =
      ledger_bytes() - static_cast<std::int64_t>(scratch_buffer_bytes());
  const std::vector<std::size_t> first_of_kind = first_of_each_kind(spec);
  std::vector<MeasuredKind> kinds;
  for (std::size_t b = 0; b < blocks; ++b) {
    if (first_of_kind[b] == b) {
      kinds.push_back(
          {b, static_cast<int>(std::count(first_of_kind.begin(), first_of_kind.end(), b))});
    }
  }
  SPW_TRY(time_blocks(settings, mb, options, process_start, kinds, profile.blocks, times));
  if (options.microbatch_samples > 1) {
    SPW_TRY(time_one_sample(settings, *data, options, process_start, kinds, profile));
  }
  SPW_TRY(measure_scratch_growth(settings, *data, options, process_start, kinds, profile));
  for (const MeasuredKind& kind : kinds) {
    const std::size_t b = kind.block;
    profile.blocks[b].forward_s = median(times[b].forward);
    profile.blocks[b].backward_input_s = median(times[b].backward_input);
    profile.blocks[b].backward_weight_s = median(times[b].backward_weight);
  }
  for (std::size_t b = 0; b < blocks; ++b) {
    profile.blocks[b] = profile.blocks[first_of_kind[b]];
    profile.blocks[b].name = names[b];
    profile.optimizer_step_s += median(times[first_of_kind[b]].step);
  }
  MemoryLedger::process().reset_peaks();
  SPW_TRY(sched::check_profile(profile));
  return profile;
}

}  // namespace spw
