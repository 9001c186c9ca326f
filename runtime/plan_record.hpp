// A plan as spillway writes it down: plan.json (`spillway plan`, and output.dir of a run with
// parallel.stages = "auto"), the "plan" section of report.json, and the table `spillway
// plan` prints. One JSON shape for all, built from the planner's Plan and the profile and
// topology it was made from, so what is printed, stored and compared is the same thing.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "partition/planner.hpp"
#include "partition/profile.hpp"
#include "partition/rank_topology.hpp"

namespace spw {

struct PlanSources {
  std::string how;      // "searched by the planner" or "the job's own layout, predicted"
  std::string profile;  // where the profile came from
  std::string links;    // where the link figures came from
  // What the plan priced copies with, and where the file tier's rate came from (empty: not
  // measured, the planner's default stands).
  sched::OffloadBandwidth offload;
  std::string file_rate;
};

// {"how", "layout": {...}, "predicted": {iteration, bubble, peaks, ...}, "stages": [per
// stage: blocks, ranks, times and bytes per microbatch], "explanation", "profile": {...},
// "topology": {"ranks", "links", "node_of", "nodes" (nodes_report)}}.
nlohmann::json plan_record(const sched::Plan& plan, const sched::ModelProfile& profile,
                           const sched::RankTopology& topology, const PlanSources& sources);

// The table and lines `spillway plan` prints, from a plan_record.
std::string plan_text(const nlohmann::json& record);

}  // namespace spw
