#include "runtime/head_choice.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

#include "kernels/memory_ledger.hpp"

namespace spw {
namespace {

const sched::BlockProfile* head_of(const sched::ModelProfile& profile) {
  for (const sched::BlockProfile& b : profile.blocks)
    if (b.name == "head") return &b;
  return nullptr;
}

TrainSettings chunked(const TrainSettings& settings) {
  TrainSettings out = settings;
  out.model.gpt.head_chunk_rows = kAutoHeadChunkRows;
  return out;
}

// "1.23 s a step, peak 456 MiB", or why no plan fits.
std::string summary(const Result<ModelPlan>& planned) {
  if (!planned.ok()) return "no plan (" + planned.status().message() + ")";
  const sched::Plan& plan = planned->plan;
  const auto peak = std::max_element(plan.peak_memory_bytes.begin(), plan.peak_memory_bytes.end());
  char text[96];
  std::snprintf(text, sizeof text, "%.4g s a step, peak ", plan.iteration_s);
  return text +
         format_bytes(peak == plan.peak_memory_bytes.end() ? 0 : static_cast<std::size_t>(*peak));
}

}  // namespace

bool plans_head_chunks(const TrainSettings& settings) {
  return settings.head_chunk_auto && settings.model.kind == "gpt";
}

TrainSettings chunked_head_probe(const TrainSettings& settings) {
  TrainSettings probe = chunked(settings);
  probe.model.gpt.layers = 1;
  probe.model.splits.clear();
  return probe;
}

Result<sched::ModelProfile> with_chunked_head(const TrainSettings& settings,
                                              const sched::ModelProfile& whole,
                                              const sched::ModelProfile& probe) {
  const sched::BlockProfile* measured = head_of(probe);
  if (measured == nullptr || head_of(whole) == nullptr) {
    return error(StatusCode::invalid_argument,
                 "choosing the head: the profile of " +
                     (measured == nullptr ? probe.model : whole.model) + " has no block \"head\"");
  }
  sched::ModelProfile out = whole;
  for (sched::BlockProfile& b : out.blocks)
    if (b.name == "head") b = *measured;
  out.model = profiled_model(chunked(settings)).describe();
  return out;
}

Result<ModelPlan> plan_model_and_head(const TrainSettings& settings,
                                      const sched::ModelProfile& whole,
                                      const sched::ModelProfile* chunked_profile,
                                      const sched::RankTopology& topology,
                                      const sched::OffloadBandwidth& bandwidth) {
  if (!plans_head_chunks(settings)) return plan_model(settings, whole, topology, bandwidth);
  if (chunked_profile == nullptr) {
    return error(StatusCode::internal,
                 "model.head_chunk_rows = \"auto\" without a profile of the chunked head");
  }
  TrainSettings whole_head = settings;
  whole_head.model.gpt.head_chunk_rows = 0;
  Result<ModelPlan> as_whole = plan_model(whole_head, whole, topology, bandwidth);
  Result<ModelPlan> as_chunked =
      plan_model(chunked(settings), *chunked_profile, topology, bandwidth);
  const std::string rows = std::to_string(kAutoHeadChunkRows);
  const std::string both =
      "head whole " + summary(as_whole) + "; chunked at " + rows + " rows " + summary(as_chunked);
  if (!as_whole.ok() && !as_chunked.ok()) {
    return error(as_chunked.status().code(),
                 "no plan with the head whole (" + as_whole.status().message() +
                     ") nor chunked at " + rows + " rows (" + as_chunked.status().message() + ")");
  }
  const bool take_chunked =
      !as_whole.ok() ||
      (as_chunked.ok() &&
       as_chunked->plan.iteration_s < (1 - kHeadChoiceMargin) * as_whole->plan.iteration_s);
  ModelPlan out = take_chunked ? std::move(*as_chunked) : std::move(*as_whole);
  out.head_chunk_rows = take_chunked ? kAutoHeadChunkRows : 0;
  out.plan.explanation += "\nmodel.head_chunk_rows = \"auto\": " + both + ": kept the head " +
                          (take_chunked ? "chunked" : "whole");
  return out;
}

void record_head_chunks(nlohmann::json& record, const TrainSettings& settings, std::int64_t rows) {
  if (plans_head_chunks(settings)) record["layout"]["head_chunk_rows"] = rows;
}

}  // namespace spw
