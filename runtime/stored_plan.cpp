#include "runtime/stored_plan.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "kernels/memory_ledger.hpp"
#include "runtime/auto_plan.hpp"
#include "runtime/mpi_support.hpp"
#include "runtime/node_memory_budget.hpp"
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

// The plan `record` holds, which must have been made for `world_size` ranks.
Result<AutoPlan> plan_for_ranks(const nlohmann::json& record, int world_size) {
  AutoPlan plan;
  try {
    plan = plan_from_record(record);
  } catch (const nlohmann::json::exception& e) {
    return unfit(std::string("it is no plan spillway wrote (") + e.what() + ")");
  }
  if (static_cast<int>(plan.world_rank.size()) != world_size) {
    return unfit("it was made for " + std::to_string(plan.world_rank.size()) + " ranks, not " +
                 std::to_string(world_size));
  }
  return plan;
}

// A plan made within each rank's share of its node's memory (no memory.cap) is kept only if
// its ranks' highest predicted peak fits the share now: a requeued job may land on a node
// with less memory free, where the plan would fail at the ledger mid-run.
Status fits_node_share(const nlohmann::json& record, std::size_t share) {
  std::size_t peak = 0;
  try {
    for (const auto& bytes : record.at("predicted").at("peak_bytes_by_pipeline_rank")) {
      peak = std::max(peak, bytes.get<std::size_t>());
    }
  } catch (const nlohmann::json::exception& e) {
    return unfit(std::string("it is no plan spillway wrote (") + e.what() + ")");
  }
  if (peak <= share) return Status::success();
  return unfit("its peak of " + format_bytes(peak) +
               " a rank is more than each rank's share of its node's memory now, " +
               format_bytes(share));
}

}  // namespace

Result<JobConfig> job_with_plan(const JobConfig& job, const nlohmann::json& record,
                                int world_size) {
  const nlohmann::json profiled =
      record.value("profile", nlohmann::json::object()).value("model", nlohmann::json());
  if (!profiled.is_string()) return unfit("it is no plan spillway wrote (no profile.model)");
  const std::string model = model_without_choices(job.model);
  if (!names_model(profiled.get<std::string>(), model)) {
    return unfit("it was made for the model \"" + profiled.get<std::string>() + "\", not \"" +
                 model + "\"");
  }
  SPW_ASSIGN_OR_RETURN(const AutoPlan plan, plan_for_ranks(record, world_size));
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

namespace {

// The plan.json at `path` as rank 0 read it, on every rank: its text when `fits` accepts it,
// else an empty text and why not (empty too where no file is there, the common case of a
// run with stages given, not worth a word). Rank 0 alone reads: output.dir need not be on
// every node.
struct SharedPlan {
  std::string text, why_not;
};

template <class Fits>
Result<SharedPlan> share_stored_plan(const std::string& path, MPI_Comm comm, Fits fits) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  SharedPlan out;
  if (rank == 0) {
    std::ifstream in(path);
    if (!in) {
      if (std::filesystem::exists(path)) out.why_not = "it cannot be read";
    } else {
      std::stringstream buffer;
      buffer << in.rdbuf();
      const nlohmann::json record = nlohmann::json::parse(buffer.str(), nullptr, false);
      const Status fit = record.is_discarded() ? unfit("it is not JSON") : fits(record);
      if (fit.ok()) {
        out.text = buffer.str();
      } else {
        out.why_not = fit.message();
      }
    }
  }
  SPW_TRY(broadcast_string(comm, out.text, "sharing the stored plan"));
  SPW_TRY(broadcast_string(comm, out.why_not, "sharing why the stored plan was not used"));
  return out;
}

bool plans_stages(const JobConfig& job) {
  return job.parallel.stages.form == StagesSpec::Form::automatic && !job.output.dir.empty();
}

}  // namespace

Result<StoredPlanUse> use_stored_plan(const JobConfig& job, MPI_Comm comm) {
  StoredPlanUse out;
  out.job = job;
  if (!plans_stages(job)) return out;
  out.path = job.output.dir + "/plan.json";
  int size = 1;
  MPI_Comm_size(comm, &size);
  SPW_ASSIGN_OR_RETURN(const SharedPlan shared,
                       share_stored_plan(out.path, comm, [&](const nlohmann::json& record) {
                         return job_with_plan(job, record, size).status();
                       }));
  if (shared.text.empty()) {
    out.not_used = shared.why_not;
    return out;
  }
  SPW_ASSIGN_OR_RETURN(out.job, job_with_plan(job, nlohmann::json::parse(shared.text), size));
  out.used = true;
  return out;
}

nlohmann::json planning_keys(const JobConfig& job) {
  const nlohmann::json all = to_json(job);
  nlohmann::json keys = nlohmann::json::object();
  for (const char* section : {"model", "parallel", "offload", "memory", "threads"}) {
    keys[section] = all.at(section);
  }
  for (const char* key : {"batch", "microbatches", "optimizer"}) {
    keys["train"][key] = all.at("train").at(key);
  }
  return keys;
}

Result<KeptPlan> plan_to_resume_with(const JobConfig& job, MPI_Comm comm) {
  KeptPlan out;
  if (!plans_stages(job)) return out;
  out.path = job.output.dir + "/plan.json";
  int size = 1;
  MPI_Comm_size(comm, &size);
  const nlohmann::json keys = planning_keys(job);
  std::optional<std::size_t> share;
  if (!job.memory.cap) {
    SPW_ASSIGN_OR_RETURN(share, node_memory_share(comm));
  }
  SPW_ASSIGN_OR_RETURN(
      const SharedPlan shared,
      share_stored_plan(out.path, comm, [&](const nlohmann::json& record) -> Status {
        if (!record.contains("planned_for")) {
          return unfit("it does not record the job keys it was made for");
        }
        const nlohmann::json& was = record["planned_for"];
        std::string changed;
        for (const auto& [section, value] : keys.items()) {
          if (!was.contains(section) || was[section] != value) {
            changed += (changed.empty() ? "[" : ", [") + section + "]";
          }
        }
        if (!changed.empty()) return unfit("the job's " + changed + " changed since");
        SPW_TRY(plan_for_ranks(record, size).status());
        return share ? fits_node_share(record, *share) : Status::success();
      }));
  if (shared.text.empty()) {
    out.not_kept = shared.why_not;
    return out;
  }
  out.plan = plan_from_record(nlohmann::json::parse(shared.text));
  return out;
}

std::string layout_source(const StoredPlanUse& stored, bool planned) {
  if (stored.used) return ", the plan in " + stored.path;
  if (!planned) return "";
  if (stored.not_used.empty()) return ", planned";
  return ", planned (" + stored.path + " not used: " + stored.not_used + ")";
}

}  // namespace spw
