// `spillway plan CONFIG --ranks N`: plans the job for N ranks without running them. The
// profile comes from --profile (checked against the job's model and microbatch) or is
// measured now; the topology from --topology (a matrix file or a synthetic spec) or is N
// ranks on this node, with links from an earlier run's cache in output.dir or defaults
// (kThisNodeLink). Prints the plan as a table and writes plan.json.
#pragma once

#include <string>
#include <vector>

#include "kernels/status.hpp"
#include "partition/simulator.hpp"

namespace spw {

struct PlanCommand {
  std::string config_path;
  std::vector<std::string> overrides;  // --set section.key=value
  int ranks = 0;                       // --ranks N
  std::string topology;                // --topology FILE or SPEC; empty: this node
  std::string memory_cap;              // --memory-cap BYTES ("8GiB"); empty: memory.cap
  std::string profile_path;            // --profile FILE; empty: measure now
  std::string output_path;             // --output FILE; empty: output.dir/plan.json
  int repeats = 5;                     // timed runs per pass when measuring
};

// Ranks sharing this node's memory when no earlier run measured them: Open MPI's shared-
// memory transport on the development VM moved 4.8-9.7 GB/s one way for 1-64 MiB messages
// with ~0.5 us latency (machine notes; rank_links' ping-pongs), taken as 5 GB/s and 1 us.
inline constexpr sched::Link kThisNodeLink{5e9, 1e-6};

Status run_plan_command(const PlanCommand& command);

}  // namespace spw
