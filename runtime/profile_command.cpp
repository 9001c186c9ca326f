#include "runtime/profile_command.hpp"

#include <cstdio>
#include <set>
#include <string>

#include "kernels/memory_ledger.hpp"
#include "kernels/threading.hpp"
#include "runtime/json_file.hpp"
#include "runtime/profiler.hpp"
#include "runtime/train_command.hpp"

namespace spw {

Status run_profile_command(const ProfileCommand& command) {
  SPW_ASSIGN_OR_RETURN(JobConfig job, load_job_file(command.config_path, command.overrides));
  SPW_ASSIGN_OR_RETURN(TrainSettings settings, train_settings_from(job));
  ThreadRequest threads;
  threads.threads = job.threads.count;
  SPW_TRY(setup_threads(threads).status());
  ProfileOptions options;
  options.microbatch_samples = std::max<std::int64_t>(1, settings.batch / settings.microbatches);
  options.repeats = command.repeats;
  std::string path = command.output_path;
  if (path.empty()) {
    SPW_TRY(ensure_directory(job.output.dir));
    path = job.output.dir + "/profile.json";
  }
  SPW_ASSIGN_OR_RETURN(sched::ModelProfile profile, profile_model(settings, options));
  SPW_TRY(sched::write_profile(path, profile));
  std::set<std::string> kinds;
  for (std::int64_t b = 0; b < settings.model.block_count(); ++b) {
    kinds.insert(settings.model.block_kind(b));
  }
  std::printf(
      "spillway: profiled %zu blocks (%zu kinds, one of each measured: blocks of a kind "
      "share its figures), microbatch of %lld, %s: %s\n",
      profile.blocks.size(), kinds.size(), static_cast<long long>(options.microbatch_samples),
      sched::measured_with(profile).c_str(), path.c_str());
  // Per microbatch: what F keeps (stash) and what B keeps for W (backward); per rank:
  // what the block's backward reuses all run (workspace) and the most a pass allocates
  // and frees again (scratch).
  std::printf("%-12s %11s %11s %11s %11s %11s %11s %11s %11s\n", "block", "forward ms",
              "b-input ms", "b-weight ms", "stash", "backward", "workspace", "scratch",
              "parameters");
  const auto bytes = [](std::int64_t b) { return format_bytes(static_cast<std::size_t>(b)); };
  for (const auto& b : profile.blocks) {
    std::printf("%-12s %11.3f %11.3f %11.3f %11s %11s %11s %11s %11s\n", b.name.c_str(),
                1e3 * b.forward_s, 1e3 * b.backward_input_s, 1e3 * b.backward_weight_s,
                bytes(b.stash_bytes).c_str(), bytes(b.backward_bytes).c_str(),
                bytes(b.workspace_bytes).c_str(), bytes(b.scratch_bytes).c_str(),
                bytes(b.parameter_bytes).c_str());
  }
  return Status::success();
}

}  // namespace spw
