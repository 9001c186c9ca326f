#include "partition/rank_topology.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "kernels/atomic_file.hpp"
#include "kernels/memory_ledger.hpp"

namespace spw::sched {

namespace {

using nlohmann::json;

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

Status bad(const std::string& message) { return error(StatusCode::invalid_argument, message); }

std::string pair_name(int from, int to) {
  return "link " + std::to_string(from) + "->" + std::to_string(to);
}

Status check_link(const std::string& where, const Link& link) {
  if (!std::isfinite(link.bandwidth_bytes_per_s) || link.bandwidth_bytes_per_s <= 0)
    return bad(where + " bandwidth = " + number(link.bandwidth_bytes_per_s) +
               " bytes/s must be a finite number > 0");
  if (!std::isfinite(link.latency_s) || link.latency_s < 0)
    return bad(where + " latency = " + number(link.latency_s) + " s must be finite and >= 0");
  return Status::success();
}

Link self_link() { return {std::numeric_limits<double>::infinity(), 0}; }

// Reads an N x N matrix of numbers, naming the key, row and column of a bad entry.
Result<std::vector<double>> matrix(const json& root, const char* key, int n,
                                   const std::string& where) {
  const auto it = root.find(key);
  if (it == root.end()) return error(StatusCode::not_found, where + "missing key \"" + key + "\"");
  if (!it->is_array() || it->size() != static_cast<std::size_t>(n))
    return bad(where + "\"" + key + "\" must be an array of " + std::to_string(n) + " rows");
  std::vector<double> out;
  out.reserve(static_cast<std::size_t>(n) * static_cast<std::size_t>(n));
  for (int row = 0; row < n; ++row) {
    const json& r = (*it)[static_cast<std::size_t>(row)];
    if (!r.is_array() || r.size() != static_cast<std::size_t>(n))
      return bad(where + "\"" + key + "\" row " + std::to_string(row) + " must hold " +
                 std::to_string(n) + " numbers");
    for (int col = 0; col < n; ++col) {
      const json& v = r[static_cast<std::size_t>(col)];
      if (!v.is_number())
        return bad(where + "\"" + key + "\"[" + std::to_string(row) + "][" +
                   std::to_string(col) + "] must be a number, got " + v.dump());
      out.push_back(v.get<double>());
    }
  }
  return out;
}

// An integer member >= 0 of a node-facts object; `optional` ones default to 0 (or "").
Result<std::int64_t> count_of(const json& object, const char* key, const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end())
    return error(StatusCode::not_found, where + "missing key \"" + key + "\"");
  if (!it->is_number_integer() || it->get<std::int64_t>() < 0)
    return bad(where + "\"" + key + "\" must be an integer >= 0, got " + it->dump());
  return it->get<std::int64_t>();
}

Result<std::string> text_of(const json& object, const char* key, const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end()) return std::string();
  if (!it->is_string()) return bad(where + "\"" + key + "\" must be a string, got " + it->dump());
  return it->get<std::string>();
}

Result<std::vector<NodeFacts>> nodes_from_json(const json& nodes, const std::string& where) {
  if (!nodes.is_array()) return bad(where + "\"nodes\" must be an array of node objects");
  std::vector<NodeFacts> out;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const json& object = nodes[i];
    const std::string at = where + "nodes[" + std::to_string(i) + "]: ";
    if (!object.is_object()) return bad(at + "must be an object, got " + object.dump());
    NodeFacts node;
    SPW_ASSIGN_OR_RETURN(node.name, text_of(object, "name", at));
    SPW_ASSIGN_OR_RETURN(const std::int64_t cores, count_of(object, "cores", at));
    node.cores = static_cast<int>(std::min<std::int64_t>(cores, 1 << 30));
    const auto numa = object.find("numa");
    if (numa == object.end()) return error(StatusCode::not_found, at + "missing key \"numa\"");
    if (!numa->is_array()) return bad(at + "\"numa\" must be an array");
    for (std::size_t k = 0; k < numa->size(); ++k) {
      const json& n = (*numa)[k];
      const std::string in = at + "numa[" + std::to_string(k) + "]: ";
      if (!n.is_object()) return bad(in + "must be an object, got " + n.dump());
      NumaFacts facts;
      SPW_ASSIGN_OR_RETURN(facts.memory_bytes, count_of(n, "memory_bytes", in));
      SPW_ASSIGN_OR_RETURN(facts.kind, text_of(n, "kind", in));
      SPW_ASSIGN_OR_RETURN(const std::int64_t numa_cores, count_of(n, "cores", in));
      facts.cores = static_cast<int>(std::min<std::int64_t>(numa_cores, 1 << 30));
      node.numa.push_back(std::move(facts));
    }
    out.push_back(std::move(node));
  }
  return out;
}

json nodes_to_json(const std::vector<NodeFacts>& nodes) {
  json out = json::array();
  for (const NodeFacts& node : nodes) {
    json numa = json::array();
    for (const NumaFacts& n : node.numa)
      numa.push_back({{"memory_bytes", n.memory_bytes}, {"kind", n.kind}, {"cores", n.cores}});
    out.push_back({{"name", node.name}, {"cores", node.cores}, {"numa", std::move(numa)}});
  }
  return out;
}

// "2e10@1e-6" -> a link; nullopt unless both numbers parse in full.
std::optional<Link> link_of(const std::string& text) {
  const auto at = text.find('@');
  if (at == std::string::npos) return std::nullopt;
  const std::string bandwidth = text.substr(0, at), latency = text.substr(at + 1);
  char* end = nullptr;
  Link link;
  link.bandwidth_bytes_per_s = std::strtod(bandwidth.c_str(), &end);
  if (bandwidth.empty() || *end != '\0') return std::nullopt;
  link.latency_s = std::strtod(latency.c_str(), &end);
  if (latency.empty() || *end != '\0') return std::nullopt;
  return link;
}

std::optional<int> whole_number(const std::string& text) {
  if (text.empty() || text.size() > 9 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  return std::stoi(text);
}

}  // namespace

Status check_topology(const RankTopology& t) {
  if (t.ranks < 1) return bad("topology: ranks = " + std::to_string(t.ranks) + " must be >= 1");
  const auto n = static_cast<std::size_t>(t.ranks);
  if (t.node_of.size() != n)
    return bad("topology: node_of has " + std::to_string(t.node_of.size()) + " entries for " +
               std::to_string(n) + " ranks");
  for (std::size_t r = 0; r < n; ++r)
    if (t.node_of[r] < 0)
      return bad("topology: node_of[" + std::to_string(r) + "] = " + std::to_string(t.node_of[r]) +
                 " must be >= 0");
  if (t.links.size() != n * n)
    return bad("topology: " + std::to_string(t.links.size()) + " links for " + std::to_string(n) +
               " ranks (need ranks * ranks = " + std::to_string(n * n) + ")");
  for (int from = 0; from < t.ranks; ++from)
    for (int to = 0; to < t.ranks; ++to)
      if (from != to) SPW_TRY(check_link("topology: " + pair_name(from, to), t.link(from, to)));
  if (t.nodes.empty()) return Status::success();
  for (std::size_t r = 0; r < n; ++r)
    if (static_cast<std::size_t>(t.node_of[r]) >= t.nodes.size())
      return bad("topology: node_of[" + std::to_string(r) + "] = " + std::to_string(t.node_of[r]) +
                 " but facts are given for " + std::to_string(t.nodes.size()) + " nodes");
  for (std::size_t i = 0; i < t.nodes.size(); ++i) {
    const NodeFacts& node = t.nodes[i];
    const std::string where = "topology: node " + std::to_string(i) + " ";
    if (node.cores < 0)
      return bad(where + "cores = " + std::to_string(node.cores) + " must be >= 0");
    for (std::size_t k = 0; k < node.numa.size(); ++k)
      if (node.numa[k].memory_bytes < 0 || node.numa[k].cores < 0)
        return bad(where + "NUMA node " + std::to_string(k) + ": memory_bytes = " +
                   std::to_string(node.numa[k].memory_bytes) + " and cores = " +
                   std::to_string(node.numa[k].cores) + " must be >= 0");
  }
  return Status::success();
}

std::int64_t NodeFacts::memory_bytes() const {
  std::int64_t sum = 0;
  for (const NumaFacts& n : numa) sum += n.memory_bytes;
  return sum;
}

int RankTopology::ranks_on_node(int node) const {
  return static_cast<int>(std::count(node_of.begin(), node_of.end(), node));
}

std::int64_t RankTopology::memory_per_rank(int rank) const {
  const int node = node_of[static_cast<std::size_t>(rank)];
  if (static_cast<std::size_t>(node) >= nodes.size()) return 0;
  return nodes[static_cast<std::size_t>(node)].memory_bytes() / ranks_on_node(node);
}

std::string describe_node(const RankTopology& t, int node) {
  std::string text = "node " + std::to_string(node);
  if (static_cast<std::size_t>(node) >= t.nodes.size()) return text + ": no facts known";
  const NodeFacts& facts = t.nodes[static_cast<std::size_t>(node)];
  if (!facts.name.empty()) text += " (" + facts.name + ")";
  text += ": " + std::to_string(facts.cores) + " cores, " + std::to_string(facts.numa.size()) +
          (facts.numa.size() == 1 ? " NUMA node (" : " NUMA nodes (");
  for (std::size_t k = 0; k < facts.numa.size(); ++k) {
    const NumaFacts& numa = facts.numa[k];
    text += (k ? "; " : "") + format_bytes(static_cast<std::size_t>(numa.memory_bytes)) +
            (numa.kind.empty() ? "" : " " + numa.kind) + ", " + std::to_string(numa.cores) +
            " cores";
  }
  const int ranks = t.ranks_on_node(node);
  text += "); " + std::to_string(ranks) + (ranks == 1 ? " rank" : " ranks");
  if (ranks > 0 && facts.memory_bytes() > 0)
    text += ", " + format_bytes(static_cast<std::size_t>(facts.memory_bytes() / ranks)) + " each";
  return text;
}

Result<RankTopology> synthetic_topology(int nodes, int ranks_per_node, Link intra, Link inter) {
  if (nodes < 1 || ranks_per_node < 1 || nodes > (1 << 20) / ranks_per_node)
    return bad("synthetic topology: " + std::to_string(nodes) + " nodes x " +
               std::to_string(ranks_per_node) + " ranks: both must be >= 1, at most 2^20 ranks");
  SPW_TRY(check_link("synthetic topology: intra-node", intra));
  SPW_TRY(check_link("synthetic topology: inter-node", inter));
  RankTopology t;
  t.ranks = nodes * ranks_per_node;
  for (int r = 0; r < t.ranks; ++r) t.node_of.push_back(r / ranks_per_node);
  t.links.reserve(static_cast<std::size_t>(t.ranks) * static_cast<std::size_t>(t.ranks));
  for (int from = 0; from < t.ranks; ++from)
    for (int to = 0; to < t.ranks; ++to)
      t.links.push_back(from == to ? self_link()
                        : t.node_of[static_cast<std::size_t>(from)] ==
                                t.node_of[static_cast<std::size_t>(to)]
                            ? intra
                            : inter);
  return t;
}

Result<RankTopology> topology_from_spec(std::string_view spec) {
  const std::string quoted = "topology spec \"" + std::string(spec) + "\": ";
  std::vector<std::string> parts(1);
  for (char c : spec) {
    if (c == ',')
      parts.emplace_back();
    else
      parts.back() += c;
  }
  const auto x = parts[0].find('x');
  const std::optional<int> nodes =
      x == std::string::npos ? std::nullopt : whole_number(parts[0].substr(0, x));
  const std::optional<int> per_node =
      x == std::string::npos ? std::nullopt : whole_number(parts[0].substr(x + 1));
  if (!nodes || !per_node)
    return bad(quoted + "must start with NODESxRANKS (ranks per node), e.g. \"2x4\", got \"" +
               parts[0] + "\"");
  Link intra = kSpecIntraDefault, inter = kSpecInterDefault;
  std::optional<int> cores;
  std::optional<std::int64_t> memory;
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const auto eq = parts[i].find('=');
    const std::string key = parts[i].substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : parts[i].substr(eq + 1);
    if (key == "intra" || key == "inter") {
      const std::optional<Link> link = link_of(value);
      if (!link)
        return bad(quoted + key + " must be BANDWIDTH@LATENCY in bytes/s and seconds, e.g. " +
                   key + "=2e10@1e-6, got \"" + value + "\"");
      (key == "intra" ? intra : inter) = *link;
    } else if (key == "cores") {
      cores = whole_number(value);
      if (!cores) return bad(quoted + "cores must be a whole number, got \"" + value + "\"");
    } else if (key == "memory") {
      Result<std::size_t> bytes = parse_bytes(value);
      if (!bytes.ok() ||
          *bytes > static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max()))
        return bad(quoted + "memory must be a byte count such as 256GiB, got \"" + value + "\"");
      memory = static_cast<std::int64_t>(*bytes);
    } else {
      return bad(quoted + "unknown part \"" + parts[i] +
                 "\" (known: intra=, inter=, cores=, memory=)");
    }
  }
  Result<RankTopology> t = synthetic_topology(*nodes, *per_node, intra, inter);
  if (!t.ok()) return t.status().with_context(quoted.substr(0, quoted.size() - 2));
  if (cores || memory) {
    NodeFacts node;
    node.cores = cores.value_or(0);
    node.numa.push_back({memory.value_or(0), "", node.cores});
    t->nodes.assign(static_cast<std::size_t>(*nodes), node);
  }
  return t;
}

std::string topology_to_json(const RankTopology& t) {
  json bandwidth = json::array(), latency = json::array();
  for (int from = 0; from < t.ranks; ++from) {
    json b = json::array(), l = json::array();
    for (int to = 0; to < t.ranks; ++to) {
      b.push_back(from == to ? 0.0 : t.link(from, to).bandwidth_bytes_per_s);
      l.push_back(from == to ? 0.0 : t.link(from, to).latency_s);
    }
    bandwidth.push_back(std::move(b));
    latency.push_back(std::move(l));
  }
  json out = {{"ranks", t.ranks},
              {"node_of", t.node_of},
              {"bandwidth_bytes_per_s", std::move(bandwidth)},
              {"latency_s", std::move(latency)}};
  if (!t.nodes.empty()) out["nodes"] = nodes_to_json(t.nodes);
  return out.dump() + "\n";
}

std::string node_facts_to_json(const NodeFacts& node) { return nodes_to_json({node})[0].dump(); }

Result<NodeFacts> node_facts_from_json(std::string_view text, const std::string& source) {
  const json root = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return bad(source + ": not valid JSON");
  SPW_ASSIGN_OR_RETURN(std::vector<NodeFacts> nodes,
                       nodes_from_json(json::array({root}), source + ": "));
  return std::move(nodes.front());
}

Result<RankTopology> topology_from_json(std::string_view text, const std::string& source) {
  const json root = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return bad(source + ": not valid JSON");
  if (!root.is_object()) return bad(source + ": the top level must be an object");
  const std::string where = source + ": ";
  const auto ranks = root.find("ranks");
  if (ranks == root.end()) return error(StatusCode::not_found, where + "missing key \"ranks\"");
  if (!ranks->is_number_integer() || ranks->get<std::int64_t>() < 1 ||
      ranks->get<std::int64_t>() > 1 << 16)
    return bad(where + "\"ranks\" must be an integer in [1, 65536], got " + ranks->dump());
  RankTopology t;
  t.ranks = ranks->get<int>();
  if (const auto nodes = root.find("node_of"); nodes != root.end()) {
    if (!nodes->is_array() || nodes->size() != static_cast<std::size_t>(t.ranks))
      return bad(where + "\"node_of\" must be an array of " + std::to_string(t.ranks) +
                 " node numbers");
    for (const json& node : *nodes) {
      if (!node.is_number_integer() || node.get<std::int64_t>() < 0 ||
          node.get<std::int64_t>() > std::numeric_limits<int>::max())
        return bad(where + "\"node_of\" entries must be integers >= 0, got " + node.dump());
      t.node_of.push_back(node.get<int>());
    }
  } else {
    for (int r = 0; r < t.ranks; ++r) t.node_of.push_back(r);
  }
  SPW_ASSIGN_OR_RETURN(const std::vector<double> bandwidth,
                       matrix(root, "bandwidth_bytes_per_s", t.ranks, where));
  SPW_ASSIGN_OR_RETURN(const std::vector<double> latency,
                       matrix(root, "latency_s", t.ranks, where));
  if (const auto nodes = root.find("nodes"); nodes != root.end()) {
    SPW_ASSIGN_OR_RETURN(t.nodes, nodes_from_json(*nodes, where));
  }
  for (std::size_t i = 0; i < bandwidth.size(); ++i)
    t.links.push_back(i / static_cast<std::size_t>(t.ranks) == i % static_cast<std::size_t>(t.ranks)
                          ? self_link()
                          : Link{bandwidth[i], latency[i]});
  const Status checked = check_topology(t);
  if (!checked.ok()) return checked.with_context(source);
  return t;
}

Result<RankTopology> read_topology(const std::string& path) {
  std::ifstream in(path);
  if (!in) return error(StatusCode::io_error, "cannot open topology " + path);
  std::stringstream text;
  text << in.rdbuf();
  return topology_from_json(text.str(), path);
}

Status write_topology(const std::string& path, const RankTopology& topology) {
  SPW_TRY(check_topology(topology));
  return write_file_atomically(path, topology_to_json(topology));
}

}  // namespace spw::sched
