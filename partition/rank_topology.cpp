#include "partition/rank_topology.hpp"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "kernels/atomic_file.hpp"

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
  return Status::success();
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
  const json out = {{"ranks", t.ranks},
                    {"node_of", t.node_of},
                    {"bandwidth_bytes_per_s", std::move(bandwidth)},
                    {"latency_s", std::move(latency)}};
  return out.dump() + "\n";
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
  SPW_ASSIGN_OR_RETURN(const std::vector<double> latency, matrix(root, "latency_s", t.ranks, where));
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
