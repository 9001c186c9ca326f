#include "runtime/stored_plan.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "runtime/auto_plan.hpp"
#include "runtime/mpi_support.hpp"
#include "runtime/pipeline_job.hpp"
#include "runtime/pipeline_layout.hpp"
#include "runtime/train_command.hpp"

namespace spw {

namespace {

Status unfit(const std::string& why) { return error(StatusCode::invalid_argument, why); }

// The model as a plan's profile names it, without what the planner may choose (layer cuts,
// head chunks), which the profile's name may add after it.
std::string model_without_choices(ModelConfig model) {
  model.split_layers.clear();
  model.split_layers_auto = false;
  model.head_chunk_rows = 0;
  model.head_chunk_auto = false;
  return model_spec_from(model).describe();
}

bool names_model(const std::string& profiled, const std::string& model) {
  return profiled == model || profiled.rfind(model + " ", 0) == 0;
}

Result<ScheduleKind> schedule_named(const std::string& name) {
  for (const ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b,
                                  ScheduleKind::interleaved, ScheduleKind::zb_h1}) {
    if (schedule_generator_name(kind) == name) return kind;
  }
  return unfit("it was made with the schedule \"" + name + "\", which spillway does not know");
}

}  // namespace

Result<JobConfig> job_with_plan(const JobConfig& job, const nlohmann::json& record,
                                int world_size) {
  AutoPlan plan;
  std::string profiled;
  try {
    plan = plan_from_record(record);
    profiled = record.at("profile").at("model").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    return unfit(std::string("it is no plan spillway wrote (") + e.what() + ")");
  }
  const std::string model = model_without_choices(job.model);
  if (!names_model(profiled, model)) {
    return unfit("it was made for the model \"" + profiled + "\", not \"" + model + "\"");
  }
  if (static_cast<int>(plan.world_rank.size()) != world_size) {
    return unfit("it was made for " + std::to_string(plan.world_rank.size()) + " ranks, not " +
                 std::to_string(world_size));
  }
  const PipelineLayout& l = plan.layout;
  const std::int64_t samples = std::int64_t{l.replicas} * l.microbatches * l.microbatch_samples;
  if (samples != job.train.batch) {
    return unfit("it was made for train.batch = " + std::to_string(samples) + ", not " +
                 std::to_string(job.train.batch));
  }
  JobConfig out = job;
  out.parallel.stages.form = StagesSpec::Form::ranges;
  out.parallel.stages.ranges = l.stages;
  out.parallel.replicas = l.replicas;
  out.parallel.chunks = l.chunks;
  if (l.schedule == "pipefb") {
    out.parallel.layout = Layout::pipefb;
  } else {
    out.parallel.layout = Layout::classic;
    SPW_ASSIGN_OR_RETURN(out.parallel.schedule, schedule_named(l.schedule));
  }
  if (job.model.split_layers_auto) {
    out.model.split_layers.clear();
    for (const LayerSplit& cut : plan.splits) {
      out.model.split_layers.push_back(
          {static_cast<int>(cut.layer), static_cast<int>(cut.front_heads)});
    }
    out.model.split_layers_auto = false;
  }
  if (job.model.head_chunk_auto) {
    out.model.head_chunk_rows = static_cast<int>(plan.head_chunk_rows.value_or(0));
    out.model.head_chunk_auto = false;
  }
  out.train.microbatches = l.replicas * l.microbatches;
  if (out.offload.tier == OffloadTier::automatic) out.offload.tier = OffloadTier::none;
  // What runs must be what was planned: the job's reader would build this layout from the
  // keys just set.
  auto rebuilt = requested_layout(out, world_size);
  if (!rebuilt.ok()) return unfit("its layout does not fit the job: " + rebuilt.status().message());
  if (rebuilt->stages != l.stages || rebuilt->pipeline_ranks != l.pipeline_ranks ||
      rebuilt->microbatches != l.microbatches) {
    return unfit("its layout (" + l.describe() + ") is not the one its keys give here (" +
                 rebuilt->describe() + ")");
  }
  return out;
}

Result<StoredPlanUse> use_stored_plan(const JobConfig& job, MPI_Comm comm) {
  StoredPlanUse out;
  out.job = job;
  if (job.parallel.stages.form != StagesSpec::Form::automatic || job.output.dir.empty()) {
    return out;
  }
  out.path = job.output.dir + "/plan.json";
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  // Rank 0 alone reads (output.dir need not be on every node) and shares the job it makes as
  // the record it came from, or an empty text and why not.
  std::string text, why_not;
  if (rank == 0) {
    std::ifstream in(out.path);
    if (!in) {
      // No plan there is the common case (a run with stages given), not worth a word.
      if (std::filesystem::exists(out.path)) why_not = "it cannot be read";
    } else {
      std::stringstream buffer;
      buffer << in.rdbuf();
      const nlohmann::json record = nlohmann::json::parse(buffer.str(), nullptr, false);
      const auto fits = record.is_discarded() ? Result<JobConfig>(unfit("it is not JSON"))
                                              : job_with_plan(job, record, size);
      if (fits.ok()) {
        text = buffer.str();
      } else {
        why_not = fits.status().message();
      }
    }
  }
  SPW_TRY(broadcast_string(comm, text, "sharing the stored plan"));
  SPW_TRY(broadcast_string(comm, why_not, "sharing why the stored plan was not used"));
  if (text.empty()) {
    out.not_used = why_not;
    return out;
  }
  SPW_ASSIGN_OR_RETURN(out.job, job_with_plan(job, nlohmann::json::parse(text), size));
  out.used = true;
  return out;
}

std::string layout_source(const StoredPlanUse& stored, bool planned) {
  if (stored.used) return ", the plan in " + stored.path;
  if (!planned) return "";
  if (stored.not_used.empty()) return ", planned";
  return ", planned (" + stored.path + " not used: " + stored.not_used + ")";
}

}  // namespace spw
