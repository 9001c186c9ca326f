#include "runtime/trace.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <string_view>

#include "runtime/json_file.hpp"

namespace spw {

const char* trace_track_name(TraceTrack track) {
  switch (track) {
    case TraceTrack::compute: return "compute";
    case TraceTrack::communication: return "communication";
    case TraceTrack::offload: return "offload";
    case TraceTrack::collective: return "collective";
  }
  return "unknown";
}

namespace {

using sched::Op;
using nlohmann::json;

constexpr std::array<TraceTrack, 4> kTracks{TraceTrack::compute, TraceTrack::communication,
                                            TraceTrack::collective, TraceTrack::offload};

// A NaN or infinity would turn into null in the JSON and poison every coordinate of the SVG,
// so one bad clock reading costs one event its place, not the whole file its validity.
struct Span {
  double start = 0;
  double end = 0;
};
Span span_of(const TraceEvent& event) {
  const double start = std::isfinite(event.start_s) ? event.start_s : 0.0;
  const double end = std::isfinite(event.end_s) ? event.end_s : start;
  return {start, std::max(start, end)};
}

// Events from a rank past meta.ranks still get their row rather than vanish.
int rank_count(const std::vector<TraceEvent>& events, const TraceMeta& meta) {
  int ranks = std::max(meta.ranks, 0);
  for (const TraceEvent& event : events) ranks = std::max(ranks, event.rank + 1);
  return ranks;
}

std::string event_name(const TraceEvent& event) {
  if (!event.zeroing_grads) return sched::to_string(event.instruction);
  // Appended, not "Z" + ...: GCC 12 warns falsely on that form (-Wrestrict, bug 105329).
  std::string name = "Z";
  name += std::to_string(event.instruction.chunk);
  return name;
}

// "evaluation after step 4, batch 2": where an evaluation's event (evaluation_batch > 0) ran.
std::string evaluation_text(const TraceEvent& event) {
  return "evaluation after step " + std::to_string(event.step) + ", batch " +
         std::to_string(event.evaluation_batch);
}

const char* event_op_name(const TraceEvent& event) {
  return event.zeroing_grads ? "ZeroGrads" : sched::op_name(event.instruction.op);
}

// Whole nanoseconds: finer digits are clock noise and only make the file longer.
double microseconds(double seconds) { return std::round(seconds * 1e9) / 1e3; }

}  // namespace

nlohmann::json chrome_trace_json(const std::vector<TraceEvent>& events, const TraceMeta& meta) {
  json trace_events = json::array();
  const int ranks = rank_count(events, meta);
  for (int rank = 0; rank < ranks; ++rank) {
    const auto metadata = [rank](const char* name, int tid, json args) {
      return json{{"ph", "M"}, {"name", name}, {"pid", rank}, {"tid", tid}, {"args", args}};
    };
    trace_events.push_back(metadata("process_name", 0, {{"name", "rank " + std::to_string(rank)}}));
    trace_events.push_back(metadata("process_sort_index", 0, {{"sort_index", rank}}));
    for (TraceTrack track : kTracks) {
      const int tid = static_cast<int>(track);
      trace_events.push_back(metadata("thread_name", tid, {{"name", trace_track_name(track)}}));
      trace_events.push_back(metadata("thread_sort_index", tid, {{"sort_index", tid}}));
    }
  }
  for (const TraceEvent& event : events) {
    const Span span = span_of(event);
    const sched::Instruction& in = event.instruction;
    json& added = trace_events.emplace_back(json{
        {"name", event_name(event)},
        {"cat", trace_track_name(event.track)},
        {"ph", "X"},
        {"pid", event.rank},
        {"tid", static_cast<int>(event.track)},
        {"ts", microseconds(span.start)},
        {"dur", microseconds(span.end - span.start)},
        {"args",
         {{"op", event_op_name(event)}, {"step", event.step}, {"mb", in.mb},
          {"chunk", in.chunk}, {"stage", event.stage}, {"peer", in.peer},
          {"bytes", event.bytes}}},
    });
    if (event.evaluation_batch > 0) added["args"]["evaluation_batch"] = event.evaluation_batch;
  }
  return json{{"traceEvents", std::move(trace_events)},
              {"displayTimeUnit", "ms"},
              {"otherData", {{"title", meta.title}, {"ranks", ranks}}}};
}

namespace {

// Geometry of the SVG in pixels; a rank's rows are a compute bar and two thin rows under it.
constexpr double kWidth = 1200, kLeft = 90, kRight = 20, kPlotWidth = kWidth - kLeft - kRight;
constexpr double kTop = 72, kComputeHeight = 22, kThinHeight = 8, kRowGap = 2, kRankGap = 12;
constexpr double kRankPitch = kComputeHeight + 3 * (kRowGap + kThinHeight) + kRankGap;
constexpr double kLegendEntryWidth = 98;

double track_offset(TraceTrack track) {
  switch (track) {
    case TraceTrack::compute: return 0;
    case TraceTrack::communication: return kComputeHeight + kRowGap;
    case TraceTrack::collective: return kComputeHeight + 2 * kRowGap + kThinHeight;
    case TraceTrack::offload: break;
  }
  return kComputeHeight + 3 * kRowGap + 2 * kThinHeight;
}
double track_height(TraceTrack track) {
  return track == TraceTrack::compute ? kComputeHeight : kThinHeight;
}

// Sends and receives share a colour whatever they carry: the name in the tooltip tells
// activation from gradient, the colour tells waiting on a peer from computing.
const char* op_colour(Op op) {
  switch (op) {
    case Op::forward: return "#4c78a8";
    case Op::backward_input: return "#54a24b";
    case Op::backward_weight: return "#72b7b2";
    case Op::send_act:
    case Op::send_grad:
    case Op::send_stash:
    case Op::send_params: return "#f58518";
    case Op::recv_act:
    case Op::recv_grad:
    case Op::recv_stash:
    case Op::recv_params: return "#ffbf79";
    case Op::reduce_grads: return "#b279a2";
    case Op::optimizer_step: return "#e45756";
    case Op::offload: return "#9d755d";
    case Op::prefetch: return "#bab0ac";
    case Op::drop_stash: return "#d8d8d8";
  }
  return "#000000";
}

constexpr const char* kZeroingColour = "#eeca3b";
// An evaluation's compute (its forwards, and dropping their stashes) in one colour, apart from
// training's; its sends and receives keep theirs: waiting is waiting.
constexpr const char* kEvaluationColour = "#9ecae9";

const char* event_colour(const TraceEvent& event) {
  if (event.zeroing_grads) return kZeroingColour;
  if (event.evaluation_batch > 0 && event.track == TraceTrack::compute) return kEvaluationColour;
  return op_colour(event.instruction.op);
}

struct LegendEntry {
  const char* colour;
  const char* label;
};
const std::array<LegendEntry, 11> kLegend{{{op_colour(Op::forward), "F forward"},
                                           {op_colour(Op::backward_input), "B input grad"},
                                           {op_colour(Op::backward_weight), "W weight grad"},
                                           {kZeroingColour, "Z zero grads"},
                                           {op_colour(Op::send_act), "send"},
                                           {op_colour(Op::recv_act), "receive"},
                                           {op_colour(Op::reduce_grads), "reduce grads"},
                                           {op_colour(Op::optimizer_step), "optimizer step"},
                                           {op_colour(Op::offload), "offload"},
                                           {op_colour(Op::prefetch), "prefetch"},
                                           {kEvaluationColour, "evaluation"}}};

// to_chars ignores the C locale, so a host with a decimal comma still writes valid SVG.
std::string number(double value, int decimals = 2) {
  std::array<char, 64> buffer{};
  const auto [end, ec] = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value,
                                       std::chars_format::fixed, decimals);
  if (ec != std::errc()) return "0";
  return std::string(buffer.data(), end);
}

// Bytes of a valid UTF-8 sequence starting at i, or 0; a stray byte would make the XML invalid.
std::size_t utf8_length(std::string_view text, std::size_t i) {
  const auto lead = static_cast<unsigned char>(text[i]);
  const std::size_t n = lead < 0x80 ? 1
                        : (lead >> 5) == 0x6 ? 2
                        : (lead >> 4) == 0xE ? 3
                        : (lead >> 3) == 0x1E ? 4
                                              : 0;
  if (n == 0 || i + n > text.size()) return 0;
  for (std::size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) return 0;
  return n;
}

std::string xml_escape(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    const std::size_t n = utf8_length(text, i);
    if (n == 0) {
      out += '?';
      ++i;
      continue;
    }
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '"') out += "&quot;";
    else if (c == '\'') out += "&apos;";
    // XML 1.0 allows no control characters but tab, newline and carriage return.
    else if (n == 1 && static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r')
      out += ' ';
    else out.append(text.substr(i, n));
    i += n;
  }
  return out;
}

// 1, 2 or 5 times a power of ten, so that about eight ticks span the run.
double tick_step(double span_ms) {
  const double raw = span_ms / 8;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double normal = raw / magnitude;
  return (normal <= 1 ? 1 : normal <= 2 ? 2 : normal <= 5 ? 5 : 10) * magnitude;
}

}  // namespace

std::string timeline_svg(const std::vector<TraceEvent>& events, const TraceMeta& meta) {
  const int ranks = rank_count(events, meta);
  double t0 = 0, t1 = 0;
  bool any = false;
  for (const TraceEvent& event : events) {
    if (event.rank < 0) continue;
    const Span span = span_of(event);
    t0 = any ? std::min(t0, span.start) : span.start;
    t1 = any ? std::max(t1, span.end) : span.end;
    any = true;
  }
  // An empty or instantaneous run still needs a non-zero span to divide by.
  if (t1 - t0 < 1e-6) t1 = t0 + 1e-3;
  const double scale = kPlotWidth / (t1 - t0);
  const double axis_y = kTop + ranks * kRankPitch;
  const double height = axis_y + 40;
  const std::string h = number(height, 0);

  std::string svg = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1200\" height=\"" + h +
         "\" viewBox=\"0 0 1200 " + h + "\" font-family=\"sans-serif\">\n";
  svg += "<rect x=\"0\" y=\"0\" width=\"1200\" height=\"" + h + "\" fill=\"#ffffff\"/>\n";
  svg += "<text x=\"10\" y=\"28\" font-size=\"16\" font-weight=\"bold\">" +
         xml_escape(meta.title) + "</text>\n";
  for (std::size_t i = 0; i < kLegend.size(); ++i) {
    const double x = kLeft + static_cast<double>(i) * kLegendEntryWidth;
    svg += "<rect x=\"" + number(x) + "\" y=\"42\" width=\"12\" height=\"12\" fill=\"" +
           kLegend[i].colour + "\"/>\n";
    svg += "<text x=\"" + number(x + 16) + "\" y=\"52\" font-size=\"11\">" + kLegend[i].label +
           "</text>\n";
  }
  for (int rank = 0; rank < ranks; ++rank) {
    const double top = kTop + rank * kRankPitch;
    svg += "<text x=\"" + number(kLeft - 6) + "\" y=\"" + number(top + 15) +
           "\" font-size=\"12\" text-anchor=\"end\">rank " + std::to_string(rank) + "</text>\n";
    for (TraceTrack track : kTracks) {
      svg += "<rect x=\"" + number(kLeft) + "\" y=\"" + number(top + track_offset(track)) +
             "\" width=\"" + number(kPlotWidth) + "\" height=\"" +
             number(track_height(track)) + "\" fill=\"#f2f2f2\"/>\n";
    }
  }

  const double span_ms = (t1 - t0) * 1e3;
  const double step = tick_step(span_ms);
  const int decimals = std::clamp(static_cast<int>(-std::floor(std::log10(step))), 0, 6);
  svg += "<g font-size=\"10\" text-anchor=\"middle\" fill=\"#444444\">\n";
  svg += "<line x1=\"" + number(kLeft) + "\" y1=\"" + number(axis_y) + "\" x2=\"" +
         number(kLeft + kPlotWidth) + "\" y2=\"" + number(axis_y) + "\" stroke=\"#444444\"/>\n";
  // The counter bounds the loop whatever rounding does to the tick positions.
  const double first = std::ceil(t0 * 1e3 / step) * step;
  for (int i = 0; i <= 20; ++i) {
    const double tick_ms = first + i * step;
    if (tick_ms > t1 * 1e3 + step * 1e-6) break;
    const double tick_x = kLeft + (tick_ms / 1e3 - t0) * scale;
    const std::string x = number(std::min(tick_x, kLeft + kPlotWidth));
    svg += "<line x1=\"" + x + "\" y1=\"" + number(kTop - 4) + "\" x2=\"" + x + "\" y2=\"" +
           number(axis_y + 4) + "\" stroke=\"#dddddd\"/>\n";
    svg += "<text x=\"" + x + "\" y=\"" + number(axis_y + 16) + "\">" +
           number(tick_ms, decimals) + "</text>\n";
  }
  svg += "<text x=\"" + number(kLeft + kPlotWidth) + "\" y=\"" + number(axis_y + 32) +
         "\" text-anchor=\"end\">time (ms)</text>\n</g>\n";

  svg += "<g stroke=\"#ffffff\" stroke-width=\"0.5\">\n";
  for (const TraceEvent& event : events) {
    if (event.rank < 0) continue;
    const Span span = span_of(event);
    const double x = std::clamp(kLeft + (span.start - t0) * scale, kLeft, kLeft + kPlotWidth);
    const double width = std::clamp((span.end - span.start) * scale, 0.0, kLeft + kPlotWidth - x);
    const double y = kTop + event.rank * kRankPitch + track_offset(event.track);
    const std::string name = event_name(event);
    const double ms = (span.end - span.start) * 1e3;
    std::string tooltip = "rank " + std::to_string(event.rank) + " " + name;
    if (event.stage >= 0) tooltip += " stage " + std::to_string(event.stage);
    tooltip += event.evaluation_batch > 0 ? " " + evaluation_text(event)
                                          : " step " + std::to_string(event.step);
    tooltip += " " + number(ms, ms < 1 ? 3 : 2) + " ms";
    if (event.bytes > 0) tooltip += " " + std::to_string(event.bytes) + " bytes";
    svg += "<rect x=\"" + number(x) + "\" y=\"" + number(y) + "\" width=\"" + number(width) +
           "\" height=\"" + number(track_height(event.track)) + "\" fill=\"" +
           event_colour(event) + "\"><title>" + xml_escape(tooltip) +
           "</title></rect>\n";
    // Labels only where they fit; the tooltip carries the name everywhere else.
    if (event.track == TraceTrack::compute && width >= 7.0 * static_cast<double>(name.size()) + 4) {
      svg += "<text x=\"" + number(x + width / 2) + "\" y=\"" + number(y + 15) +
             "\" font-size=\"10\" text-anchor=\"middle\" fill=\"#ffffff\" stroke=\"none\">" +
             xml_escape(name) + "</text>\n";
    }
  }
  svg += "</g>\n</svg>\n";
  return svg;
}

Status write_chrome_trace(const std::string& path, const std::vector<TraceEvent>& events,
                          const TraceMeta& meta) {
  // Replacing invalid UTF-8 (say, in a title) instead of letting dump() throw it at the caller.
  const std::string text = chrome_trace_json(events, meta).dump(-1, ' ', false,
                                                                json::error_handler_t::replace);
  return write_file_atomically(path, text + "\n").with_context("writing Chrome trace");
}

Status write_timeline_svg(const std::string& path, const std::vector<TraceEvent>& events,
                          const TraceMeta& meta) {
  return write_file_atomically(path, timeline_svg(events, meta)).with_context("writing timeline");
}

}  // namespace spw
