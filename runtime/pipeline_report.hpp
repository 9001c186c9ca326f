// What a pipeline run reports beyond the single-rank report: per-rank busy time, peak
// memory by category and peak resident set size, the measured bubble, and the simulator's
// prediction for the same schedule fed with the costs this run measured, so a reader sees
// both side by side and where they part. All functions are collective over the executor's
// world; the results are meaningful on world rank 0 only.
#pragma once

#include <mpi.h>

#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/status.hpp"
#include "runtime/pipeline_executor.hpp"
#include "runtime/trace.hpp"

namespace spw {

struct LinkEstimate {
  double bandwidth_bytes_per_s = 0;  // 0: no link was measured (one pipeline rank)
  double latency_s = 0;
};

struct LinkEstimates {
  LinkEstimate pipeline;  // between neighbouring stages (activations, gradients)
  LinkEstimate replica;   // between neighbouring replicas (the gradient all-reduce)
};

// Ping-pongs between neighbouring pipeline ranks (8 bytes and one activation) and between
// neighbouring replicas (8 bytes and 1 MiB); means over the pairs. A few milliseconds.
Result<LinkEstimates> measure_links(PipelineExecutor& executor, MPI_Comm world);

// The "pipeline" object of report.json. node_of: each world rank's node (RankNodes::node_of).
Result<nlohmann::json> pipeline_report(PipelineExecutor& executor, MPI_Comm world,
                                       const LinkEstimates& links,
                                       const std::vector<int>& node_of);

// Every rank's trace events on world rank 0, ordered by rank.
Result<std::vector<TraceEvent>> gather_trace(const PipelineExecutor& executor, MPI_Comm world);

// Median of `values` without the first entry (the warm-up step) when there are others.
double median_after_first(const std::vector<double>& values);

}  // namespace spw
