// What a pipeline run did, instruction by instruction and rank by rank, in two forms: a Chrome
// trace for Perfetto or chrome://tracing, where one zooms and measures, and an SVG timeline
// that a report or a browser shows at a glance with nothing to install. Both are built from
// the same event list so they never disagree.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/status.hpp"
#include "partition/schedule.hpp"

namespace spw {

// Rows a rank's events are drawn on: overlapping transfers would hide compute on one row.
// Point-to-point transfers and the data-parallel all-reduce get separate tracks because they
// overlap in time: one track each keeps every track's slices properly nested for Perfetto.
enum class TraceTrack : std::uint8_t { compute, communication, offload, collective };
const char* trace_track_name(TraceTrack track);  // "compute", "communication", ...

struct TraceEvent {
  int rank = 0;                    // world rank (Chrome trace pid)
  int step = 0;                    // 1-based training step, or the one an evaluation followed
  int evaluation_batch = 0;        // 0: a training step's; k >= 1: batch k of an evaluation
  TraceTrack track = TraceTrack::compute;
  sched::Instruction instruction;  // what ran
  int stage = -1;                  // global pipeline stage, -1 for OptimizerStep
  std::int64_t bytes = 0;          // bytes moved by sends/receives/reduces/offloads, else 0
  double start_s = 0;              // seconds since the run's common time origin
  double end_s = 0;
  // Not an instruction: instruction.chunk's gradients zeroed for the step while the rank
  // waited for a message (named "Z<chunk>", op "ZeroGrads").
  bool zeroing_grads = false;
};

struct TraceMeta {
  std::string title;  // e.g. "gpt, 1f1b, 2 stages x 1 replica, 8 microbatches"
  int ranks = 1;      // world ranks; every rank gets a process row even with no events
};

// Chrome trace-event format: complete ("X") events with ts/dur in microseconds, pid = rank,
// tid = track, named by sched::to_string(instruction) (or "Z<chunk>" for zeroing_grads), args
// step, mb, chunk, stage, peer, bytes and op; process_name/thread_name metadata for every
// rank and track.
// Events with end_s < start_s get dur 0; a non-finite start is taken as the origin and a
// non-finite end as the start, so the file stays valid JSON without nulls.
nlohmann::json chrome_trace_json(const std::vector<TraceEvent>& events, const TraceMeta& meta);

// A self-contained SVG, 1200 px wide: per rank a compute bar with thinner communication and
// offload rows under it, one coloured rect per event with a <title> tooltip, a legend, a time
// axis in ms and meta.title as heading. Events with a negative rank are not drawn.
std::string timeline_svg(const std::vector<TraceEvent>& events, const TraceMeta& meta);

// Written with write_file_atomically; an error names the path.
Status write_chrome_trace(const std::string& path, const std::vector<TraceEvent>& events,
                          const TraceMeta& meta);
Status write_timeline_svg(const std::string& path, const std::vector<TraceEvent>& events,
                          const TraceMeta& meta);

}  // namespace spw
