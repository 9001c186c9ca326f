// The trace files are read by tools we do not control (Perfetto, chrome://tracing, browsers),
// which reject or silently misdraw a malformed file: so the JSON is checked field by field and
// the SVG is parsed as XML and its geometry measured, not just searched for strings.
#include "runtime/trace.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <charconv>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "temp_dir.hpp"

namespace spw {
namespace {

namespace fs = std::filesystem;
using sched::Instruction;
using nlohmann::json;

TraceEvent make_event(int rank, int step, TraceTrack track, Instruction instruction, int stage,
                      std::int64_t bytes, double start_s, double end_s) {
  TraceEvent event;
  event.rank = rank;
  event.step = step;
  event.track = track;
  event.instruction = instruction;
  event.stage = stage;
  event.bytes = bytes;
  event.start_s = start_s;
  event.end_s = end_s;
  return event;
}

// Two busy ranks of a three-rank run (rank 2 did nothing), one event of every kind of op so
// that colours can be told apart, and a backward whose clock went backwards.
std::vector<TraceEvent> sample_events() {
  const auto compute = TraceTrack::compute;
  const auto comm = TraceTrack::communication;
  const auto offload = TraceTrack::offload;
  return {
      make_event(0, 1, compute, Instruction::forward(0, 0), 0, 0, 0.001, 0.00223),
      make_event(0, 1, comm, Instruction::send_act(0, 0, 1), 0, 4096, 0.00223, 0.0025),
      make_event(1, 1, comm, Instruction::recv_act(0, 0, 0), 1, 4096, 0.0022, 0.0025),
      make_event(1, 2, compute, Instruction::forward(3, 0), 1, 0, 0.0025, 0.00373),
      make_event(1, 2, offload, Instruction::offload(3, 0), 1, 1024, 0.004, 0.0045),
      make_event(1, 2, offload, Instruction::prefetch(3, 0), 1, 1024, 0.0046, 0.0049),
      make_event(1, 2, compute, Instruction::backward_input(3, 0), 1, 0, 0.005, 0.0062),
      make_event(1, 2, compute, Instruction::backward_weight(3, 0), 1, 0, 0.0062, 0.007),
      make_event(1, 2, comm, Instruction::send_grad(3, 0, 0), 1, 4096, 0.0062, 0.0064),
      make_event(0, 2, comm, Instruction::recv_grad(3, 0, 1), 0, 4096, 0.0061, 0.0064),
      make_event(0, 2, comm, Instruction::reduce_grads(0), 0, 8192, 0.0065, 0.0075),
      make_event(0, 2, compute, Instruction::optimizer_step(), -1, 0, 0.0075, 0.008),
      make_event(0, 2, compute, Instruction::backward_input(1, 0), 0, 0, 0.0070, 0.0069),
  };
}

TraceMeta sample_meta() { return {"gpt, 1f1b, 2 stages x 1 replica, 8 microbatches", 3}; }

std::vector<json> events_with_phase(const json& trace, const std::string& phase) {
  std::vector<json> out;
  for (const json& event : trace.at("traceEvents"))
    if (event.at("ph") == phase) out.push_back(event);
  return out;
}

TEST(TraceTrackName, NamesEveryTrack) {
  EXPECT_STREQ(trace_track_name(TraceTrack::compute), "compute");
  EXPECT_STREQ(trace_track_name(TraceTrack::communication), "communication");
  EXPECT_STREQ(trace_track_name(TraceTrack::offload), "offload");
}

TEST(ChromeTrace, OneCompleteEventPerTraceEventInMicroseconds) {
  const auto events = sample_events();
  const json trace = chrome_trace_json(events, sample_meta());
  const auto complete = events_with_phase(trace, "X");
  ASSERT_EQ(complete.size(), events.size());
  for (std::size_t i = 0; i < events.size(); ++i) {
    SCOPED_TRACE(i);
    const json& x = complete[i];
    EXPECT_EQ(x.at("name"), sched::to_string(events[i].instruction));
    EXPECT_EQ(x.at("pid"), events[i].rank);
    EXPECT_EQ(x.at("tid"), static_cast<int>(events[i].track));
    EXPECT_EQ(x.at("cat"), trace_track_name(events[i].track));
    EXPECT_NEAR(x.at("ts").get<double>(), events[i].start_s * 1e6, 1e-6);
    const double expected_dur = std::max(0.0, events[i].end_s - events[i].start_s) * 1e6;
    EXPECT_NEAR(x.at("dur").get<double>(), expected_dur, 1e-6);
  }
  EXPECT_DOUBLE_EQ(complete[0].at("ts").get<double>(), 1000.0);
  EXPECT_DOUBLE_EQ(complete[0].at("dur").get<double>(), 1230.0);
  EXPECT_EQ(complete[1].at("name"), "SA0.0>1");
  EXPECT_EQ(complete[2].at("name"), "RA0.0<0");
  EXPECT_EQ(complete[11].at("name"), "OPT");
}

TEST(ChromeTrace, ArgsCarryStepMicrobatchChunkStagePeerAndBytes) {
  const json trace = chrome_trace_json(sample_events(), sample_meta());
  const auto complete = events_with_phase(trace, "X");
  const json& send = complete[1].at("args");
  EXPECT_EQ(send.at("step"), 1);
  EXPECT_EQ(send.at("mb"), 0);
  EXPECT_EQ(send.at("chunk"), 0);
  EXPECT_EQ(send.at("stage"), 0);
  EXPECT_EQ(send.at("peer"), 1);
  EXPECT_EQ(send.at("bytes"), 4096);
  EXPECT_EQ(send.at("op"), "SendAct");
  const json& forward = complete[3].at("args");
  EXPECT_EQ(forward.at("step"), 2);
  EXPECT_EQ(forward.at("mb"), 3);
  EXPECT_EQ(forward.at("stage"), 1);
  EXPECT_EQ(forward.at("peer"), -1);
  EXPECT_EQ(forward.at("bytes"), 0);
  const json& step = complete[11].at("args");
  EXPECT_EQ(step.at("stage"), -1);
  EXPECT_EQ(step.at("op"), "OptimizerStep");
}

TEST(ChromeTrace, NamesEveryRankAndTrackEvenWithoutEvents) {
  const json trace = chrome_trace_json(sample_events(), sample_meta());
  std::map<int, std::string> processes;
  std::set<std::pair<int, int>> threads;
  for (const json& m : events_with_phase(trace, "M")) {
    if (m.at("name") == "process_name")
      processes[m.at("pid").get<int>()] = m.at("args").at("name").get<std::string>();
    if (m.at("name") == "thread_name") {
      const int tid = m.at("tid").get<int>();
      EXPECT_EQ(m.at("args").at("name"), trace_track_name(static_cast<TraceTrack>(tid)));
      threads.insert({m.at("pid").get<int>(), tid});
    }
  }
  const std::map<int, std::string> expected{{0, "rank 0"}, {1, "rank 1"}, {2, "rank 2"}};
  EXPECT_EQ(processes, expected);
  EXPECT_EQ(threads.size(), 12u);  // 3 ranks x 4 tracks
  EXPECT_TRUE(threads.count({2, 0}) && threads.count({2, 1}) && threads.count({2, 2}) &&
              threads.count({2, 3}));
}

TEST(ChromeTrace, TopLevelFieldsAndARankPastMetaStillNamed) {
  std::vector<TraceEvent> events{
      make_event(4, 1, TraceTrack::compute, Instruction::forward(0, 0), 4, 0, 0.0, 0.001)};
  const json trace = chrome_trace_json(events, {"late rank", 2});
  EXPECT_EQ(trace.at("displayTimeUnit"), "ms");
  EXPECT_EQ(trace.at("otherData").at("title"), "late rank");
  int named = 0;
  for (const json& m : events_with_phase(trace, "M"))
    if (m.at("name") == "process_name") ++named;
  EXPECT_EQ(named, 5);
}

TEST(ChromeTrace, BadTimesNeverGiveNegativeOrNullDurations) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<TraceEvent> events{
      make_event(0, 1, TraceTrack::compute, Instruction::forward(0, 0), 0, 0, 0.002, 0.001),
      make_event(0, 1, TraceTrack::compute, Instruction::forward(1, 0), 0, 0, nan, 0.001),
      make_event(0, 1, TraceTrack::compute, Instruction::forward(2, 0), 0, 0, 0.003, nan)};
  const json trace = chrome_trace_json(events, {"t", 1});
  const auto complete = events_with_phase(trace, "X");
  ASSERT_EQ(complete.size(), 3u);
  EXPECT_DOUBLE_EQ(complete[0].at("dur").get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(complete[1].at("ts").get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(complete[1].at("dur").get<double>(), 1000.0);
  EXPECT_DOUBLE_EQ(complete[2].at("dur").get<double>(), 0.0);
  EXPECT_EQ(trace.dump().find("null"), std::string::npos);
}

// A minimal XML reader: enough to prove well-formedness (nesting, quoting, entities, no stray
// control characters) and to give the tests each element's attributes and text.
struct Element {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::string text;
  int parent = -1;
};
struct Document {
  std::string error;  // empty when well-formed
  std::vector<Element> elements;
};

std::optional<std::string> decode(std::string_view raw) {
  static const std::map<std::string, char> kEntities{
      {"lt", '<'}, {"gt", '>'}, {"amp", '&'}, {"quot", '"'}, {"apos", '\''}};
  std::string out;
  for (std::size_t i = 0; i < raw.size(); ++i) {
    const auto c = static_cast<unsigned char>(raw[i]);
    if (c == '<' || (c < 0x20 && c != '\t' && c != '\n' && c != '\r')) return std::nullopt;
    if (c != '&') {
      out += raw[i];
      continue;
    }
    const std::size_t semi = raw.find(';', i);
    if (semi == std::string_view::npos) return std::nullopt;
    const auto entity = kEntities.find(std::string(raw.substr(i + 1, semi - i - 1)));
    if (entity == kEntities.end()) return std::nullopt;
    out += entity->second;
    i = semi;
  }
  return out;
}

Document parse_xml(const std::string& xml) {
  Document doc;
  std::vector<int> open;
  bool root_done = false;
  std::size_t i = 0;
  if (xml.rfind("<?xml", 0) == 0) i = xml.find("?>") + 2;
  while (i < xml.size()) {
    if (xml[i] != '<') {
      const std::size_t next = std::min(xml.find('<', i), xml.size());
      const auto text = decode(std::string_view(xml).substr(i, next - i));
      if (!text) return {"bad character data at " + std::to_string(i), {}};
      if (open.empty() && text->find_first_not_of(" \t\r\n") != std::string::npos)
        return {"text outside the root at " + std::to_string(i), {}};
      if (!open.empty()) doc.elements[open.back()].text += *text;
      i = next;
      continue;
    }
    const std::size_t close = xml.find('>', i);
    if (close == std::string::npos) return {"unterminated tag", {}};
    std::string_view tag = std::string_view(xml).substr(i + 1, close - i - 1);
    i = close + 1;
    if (tag.starts_with('/')) {
      if (open.empty() || doc.elements[open.back()].name != tag.substr(1))
        return {"mismatched </" + std::string(tag.substr(1)) + ">", {}};
      open.pop_back();
      root_done = open.empty();
      continue;
    }
    if (root_done && open.empty()) return {"second root element", {}};
    const bool self_closing = tag.ends_with('/');
    if (self_closing) tag.remove_suffix(1);
    Element element;
    std::size_t p = std::min(tag.find_first_of(" \t\r\n"), tag.size());
    element.name = std::string(tag.substr(0, p));
    while ((p = tag.find_first_not_of(" \t\r\n", p)) != std::string_view::npos) {
      const std::size_t eq = tag.find('=', p);
      if (eq == std::string_view::npos || eq + 1 >= tag.size() || tag[eq + 1] != '"')
        return {"malformed attribute in <" + element.name + ">", {}};
      const std::size_t end = tag.find('"', eq + 2);
      if (end == std::string_view::npos) return {"unterminated attribute", {}};
      const auto value = decode(tag.substr(eq + 2, end - eq - 2));
      if (!value || !element.attrs.emplace(std::string(tag.substr(p, eq - p)), *value).second)
        return {"bad or repeated attribute in <" + element.name + ">", {}};
      p = end + 1;
    }
    element.parent = open.empty() ? -1 : open.back();
    doc.elements.push_back(std::move(element));
    if (!self_closing) open.push_back(static_cast<int>(doc.elements.size()) - 1);
    else root_done = open.empty();
  }
  if (!open.empty() || !root_done) return {"unclosed elements or no root", {}};
  return doc;
}

double number_attr(const Element& element, const std::string& name) {
  const std::string& text = element.attrs.at(name);
  double value = std::numeric_limits<double>::quiet_NaN();
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

// Rects with a <title> child are the events; keyed by tooltip.
std::map<std::string, Element> event_rects(const Document& doc) {
  std::map<std::string, Element> out;
  for (const Element& e : doc.elements)
    if (e.name == "title" && e.parent >= 0 && doc.elements[e.parent].name == "rect")
      out.emplace(e.text, doc.elements[e.parent]);
  return out;
}

// The SVG tests are only as strict as this reader: it must reject what a browser rejects.
TEST(XmlReader, RejectsMalformedDocuments) {
  EXPECT_EQ(parse_xml("<svg><g><rect x=\"1\"/></g></svg>").error, "");
  for (const char* bad : {"<svg><g></svg></g>", "<svg>", "<svg>a < b</svg>", "<svg>a & b</svg>",
                          "<svg><rect x=1/></svg>", "<svg><rect x=\"1\" x=\"2\"/></svg>",
                          "<svg/><svg/>", "<svg>\x01</svg>", "text<svg/>"})
    EXPECT_NE(parse_xml(bad).error, "") << bad;
}

TEST(TimelineSvg, IsWellFormedWithOneRectPerEventInsideTheViewBox) {
  const auto events = sample_events();
  const std::string svg = timeline_svg(events, sample_meta());
  const Document doc = parse_xml(svg);
  ASSERT_EQ(doc.error, "") << svg;
  const Element& root = doc.elements.at(0);
  EXPECT_EQ(root.name, "svg");
  EXPECT_EQ(root.attrs.at("xmlns"), "http://www.w3.org/2000/svg");
  std::istringstream view_box(root.attrs.at("viewBox"));
  double x0 = -1, y0 = -1, width = 0, height = 0;
  view_box >> x0 >> y0 >> width >> height;
  EXPECT_EQ(x0, 0);
  EXPECT_EQ(y0, 0);
  EXPECT_EQ(width, 1200);
  EXPECT_GT(height, 0);
  EXPECT_EQ(svg.find("<script"), std::string::npos);

  const auto rects = event_rects(doc);
  ASSERT_EQ(rects.size(), events.size());
  for (const auto& [tooltip, rect] : rects) {
    SCOPED_TRACE(tooltip);
    const double x = number_attr(rect, "x"), w = number_attr(rect, "width");
    const double y = number_attr(rect, "y"), h = number_attr(rect, "height");
    EXPECT_GE(x, 0);
    EXPECT_GE(w, 0);
    EXPECT_LE(x + w, width);
    EXPECT_GE(y, 0);
    EXPECT_GT(h, 0);
    EXPECT_LE(y + h, height);
  }
}

TEST(TimelineSvg, TooltipsPlaceAndColourFollowTheEvents) {
  const Document doc = parse_xml(timeline_svg(sample_events(), sample_meta()));
  ASSERT_EQ(doc.error, "");
  const auto rects = event_rects(doc);
  const auto rect = [&](const std::string& tooltip) -> const Element& {
    static const Element missing;
    const auto found = rects.find(tooltip);
    EXPECT_NE(found, rects.end()) << tooltip;
    return found == rects.end() ? missing : found->second;
  };
  const Element& f3 = rect("rank 1 F3.0 stage 1 step 2 1.23 ms");
  const Element& f0 = rect("rank 0 F0.0 stage 0 step 1 1.23 ms");
  const Element& send = rect("rank 0 SA0.0>1 stage 0 step 1 0.270 ms 4096 bytes");
  const Element& opt = rect("rank 0 OPT step 2 0.500 ms");
  const Element& backwards = rect("rank 0 B1.0 stage 0 step 2 0.000 ms");
  if (::testing::Test::HasFailure()) return;

  // The earliest event starts the plot and the last one ends it; time grows to the right.
  EXPECT_LT(number_attr(f0, "x"), number_attr(f3, "x"));
  EXPECT_NEAR(number_attr(f0, "width"), number_attr(f3, "width"), 0.02);
  EXPECT_NEAR(number_attr(opt, "x") + number_attr(opt, "width"), 1180, 0.02);
  // Rank 1 below rank 0, communication a thinner row under compute.
  EXPECT_GT(number_attr(f3, "y"), number_attr(f0, "y"));
  EXPECT_GT(number_attr(send, "y"), number_attr(f0, "y"));
  EXPECT_LT(number_attr(send, "height"), number_attr(f0, "height"));
  EXPECT_EQ(number_attr(backwards, "width"), 0);

  std::map<std::string, std::set<std::string>> fills;  // by op short name
  for (const auto& [tooltip, r] : rects) {
    const std::string name = tooltip.substr(7, tooltip.find(' ', 7) - 7);
    fills[name.substr(0, name.find_first_of("0123456789"))].insert(r.attrs.at("fill"));
  }
  ASSERT_EQ(fills.size(), 11u);  // F B W SA RA SG RG OF PF RD OPT
  std::set<std::string> colours;
  for (const auto& [op, fill] : fills) {
    EXPECT_EQ(fill.size(), 1u) << op;
    colours.insert(*fill.begin());
  }
  EXPECT_EQ(fills["SA"], fills["SG"]);
  EXPECT_EQ(fills["RA"], fills["RG"]);
  EXPECT_EQ(colours.size(), 9u);  // every other op its own colour
}

// Gradients zeroed while a rank waited are no instruction: they carry the chunk they were
// zeroed for, and get a name, an op and a colour of their own.
TEST(Trace, ZeroingEventsAreNamedAndColouredApart) {
  TraceEvent zeroing = make_event(1, 2, TraceTrack::compute, Instruction::backward_weight(-1, 1), 1,
                                  0, 0.002, 0.0025);
  zeroing.zeroing_grads = true;
  const std::vector<TraceEvent> events{
      make_event(1, 2, TraceTrack::compute, Instruction::backward_weight(0, 1), 1, 0, 0.003, 0.004),
      zeroing};
  const auto complete = events_with_phase(chrome_trace_json(events, sample_meta()), "X");
  ASSERT_EQ(complete.size(), 2u);
  EXPECT_EQ(complete[0].at("name"), "W0.1");
  EXPECT_EQ(complete[0].at("args").at("op"), "BackwardWeight");
  EXPECT_EQ(complete[1].at("name"), "Z1");
  EXPECT_EQ(complete[1].at("args").at("op"), "ZeroGrads");
  EXPECT_EQ(complete[1].at("args").at("chunk"), 1);
  EXPECT_EQ(complete[1].at("tid"), static_cast<int>(TraceTrack::compute));

  const Document doc = parse_xml(timeline_svg(events, sample_meta()));
  ASSERT_EQ(doc.error, "");
  const auto rects = event_rects(doc);
  const auto z = rects.find("rank 1 Z1 stage 1 step 2 0.500 ms");
  const auto w = rects.find("rank 1 W0.1 stage 1 step 2 1.00 ms");
  ASSERT_NE(z, rects.end());
  ASSERT_NE(w, rects.end());
  EXPECT_EQ(z->second.attrs.at("fill"), "#eeca3b");
  EXPECT_NE(z->second.attrs.at("fill"), w->second.attrs.at("fill"));
  // The legend's swatch for it has the same colour.
  bool swatch = false;
  for (const Element& e : doc.elements)
    if (e.name == "rect" && e.attrs.count("fill") && e.attrs.at("fill") == "#eeca3b" &&
        e.attrs.count("width") && e.attrs.at("width") == "12")
      swatch = true;
  EXPECT_TRUE(swatch);
}

// An evaluation between steps runs the forwards of the training schedule: its events carry the
// step they followed and their batch, and are drawn in a colour of their own.
TEST(Trace, EvaluationEventsSayWhichEvaluationAndAreColouredApart) {
  TraceEvent forward =
      make_event(0, 3, TraceTrack::compute, Instruction::forward(1, 0), 0, 0, 0.010, 0.0115);
  forward.evaluation_batch = 2;
  TraceEvent send = make_event(0, 3, TraceTrack::communication, Instruction::send_act(1, 0, 1), 0,
                               4096, 0.0115, 0.0117);
  send.evaluation_batch = 2;
  const std::vector<TraceEvent> events{
      make_event(0, 3, TraceTrack::compute, Instruction::forward(1, 0), 0, 0, 0.001, 0.002),
      forward, send};
  const auto complete = events_with_phase(chrome_trace_json(events, sample_meta()), "X");
  ASSERT_EQ(complete.size(), 3u);
  EXPECT_FALSE(complete[0].at("args").contains("evaluation_batch"));
  EXPECT_EQ(complete[1].at("name"), "F1.0");
  EXPECT_EQ(complete[1].at("args").at("op"), "Forward");
  EXPECT_EQ(complete[1].at("args").at("step"), 3);
  EXPECT_EQ(complete[1].at("args").at("evaluation_batch"), 2);
  EXPECT_EQ(complete[2].at("args").at("evaluation_batch"), 2);

  const Document doc = parse_xml(timeline_svg(events, sample_meta()));
  ASSERT_EQ(doc.error, "");
  const auto rects = event_rects(doc);
  const auto training = rects.find("rank 0 F1.0 stage 0 step 3 1.00 ms");
  const auto evaluated = rects.find("rank 0 F1.0 stage 0 evaluation after step 3, batch 2 1.50 ms");
  const auto sent =
      rects.find("rank 0 SA1.0>1 stage 0 evaluation after step 3, batch 2 0.200 ms 4096 bytes");
  ASSERT_NE(training, rects.end());
  ASSERT_NE(evaluated, rects.end());
  ASSERT_NE(sent, rects.end());
  EXPECT_EQ(evaluated->second.attrs.at("fill"), "#9ecae9");
  EXPECT_NE(training->second.attrs.at("fill"), evaluated->second.attrs.at("fill"));
  // A send is a send, in an evaluation or not: the colour tells waiting from computing.
  EXPECT_EQ(sent->second.attrs.at("fill"), "#f58518");
}

TEST(TimelineSvg, HeadingRowsLegendAndAxis) {
  TraceMeta meta = sample_meta();
  meta.title = "gpt <1f1b> & \"zb\" 'h1'\x01";
  const std::string svg = timeline_svg(sample_events(), meta);
  const Document doc = parse_xml(svg);
  ASSERT_EQ(doc.error, "");
  EXPECT_NE(svg.find("gpt &lt;1f1b&gt; &amp; &quot;zb&quot; &apos;h1&apos; "), std::string::npos);
  std::set<std::string> texts;
  for (const Element& e : doc.elements)
    if (e.name == "text") texts.insert(e.text);
  EXPECT_TRUE(texts.count("gpt <1f1b> & \"zb\" 'h1' "));
  EXPECT_TRUE(texts.count("rank 0") && texts.count("rank 1") && texts.count("rank 2"));
  EXPECT_FALSE(texts.count("rank 3"));
  for (const char* legend :
       {"F forward", "B input grad", "W weight grad", "Z zero grads", "send", "receive",
        "reduce grads", "optimizer step", "offload", "prefetch", "evaluation"})
    EXPECT_TRUE(texts.count(legend)) << legend;
  // The run spans 1 ms to 8 ms: ticks every 1 ms, labelled in ms.
  EXPECT_TRUE(texts.count("time (ms)"));
  for (const char* tick : {"1", "2", "5", "8"}) EXPECT_TRUE(texts.count(tick)) << tick;
  EXPECT_FALSE(texts.count("9"));
}

TEST(TimelineSvg, EmptyAndDegenerateRunsStayValid) {
  const Document empty = parse_xml(timeline_svg({}, {"nothing ran", 2}));
  ASSERT_EQ(empty.error, "");
  EXPECT_TRUE(event_rects(empty).empty());

  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<TraceEvent> events{
      make_event(0, 1, TraceTrack::compute, Instruction::forward(0, 0), 0, 0, 0.5, 0.5),
      make_event(0, 1, TraceTrack::compute, Instruction::forward(1, 0), 0, 0, nan, nan),
      make_event(-1, 1, TraceTrack::compute, Instruction::forward(2, 0), 0, 0, 0.1, 0.2)};
  const std::string svg = timeline_svg(events, {"bad \xff utf-8", 1});
  const Document doc = parse_xml(svg);
  ASSERT_EQ(doc.error, "") << svg;
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  const auto rects = event_rects(doc);
  ASSERT_EQ(rects.size(), 2u);  // the rank -1 event has no row
  for (const auto& [tooltip, rect] : rects) {
    EXPECT_GE(number_attr(rect, "x"), 90) << tooltip;
    EXPECT_LE(number_attr(rect, "x"), 1180) << tooltip;
    EXPECT_EQ(number_attr(rect, "width"), 0) << tooltip;
  }
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(WriteTrace, WritesBothFilesWithExactlyTheRenderedContent) {
  TempDir dir("spw-trace");
  const auto events = sample_events();
  ASSERT_TRUE(write_chrome_trace(dir.file("trace.json"), events, sample_meta()).ok());
  ASSERT_TRUE(write_timeline_svg(dir.file("timeline.svg"), events, sample_meta()).ok());
  EXPECT_EQ(json::parse(read_all(dir.file("trace.json"))),
            chrome_trace_json(events, sample_meta()));
  EXPECT_EQ(read_all(dir.file("timeline.svg")), timeline_svg(events, sample_meta()));
  const auto entries = dir.entries();
  EXPECT_EQ(std::set<std::string>(entries.begin(), entries.end()),
            (std::set<std::string>{"timeline.svg", "trace.json"}));
}

TEST(WriteTrace, InvalidUtf8InTheTitleIsReplacedNotThrown) {
  TempDir dir("spw-trace");
  const Status status = write_chrome_trace(dir.file("trace.json"), {}, {"bad \xff title", 1});
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_TRUE(json::accept(read_all(dir.file("trace.json"))));
}

TEST(WriteTrace, MissingDirectoryFailsNamingThePathAndLeavesNothing) {
  TempDir dir("spw-trace");
  for (const std::string& path :
       {dir.file("missing/trace.json"), dir.file("missing/timeline.svg")}) {
    const Status status = path.ends_with(".json") ? write_chrome_trace(path, sample_events(), {})
                                                  : write_timeline_svg(path, sample_events(), {});
    EXPECT_FALSE(status.ok());
    EXPECT_EQ(status.code(), StatusCode::io_error);
    EXPECT_NE(status.message().find(path), std::string::npos) << status.message();
  }
  EXPECT_TRUE(dir.entries().empty());
}

TEST(WriteTrace, TargetThatIsADirectoryFailsAndRemovesItsTemporaryFile) {
  TempDir dir("spw-trace");
  fs::create_directory(dir.file("trace.json"));
  const Status status = write_chrome_trace(dir.file("trace.json"), sample_events(), {});
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find(dir.file("trace.json")), std::string::npos) << status.message();
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"trace.json"});
  EXPECT_TRUE(fs::is_directory(dir.file("trace.json")));
}

}  // namespace
}  // namespace spw
