#include "runtime/job_reader.hpp"

#include <sstream>

namespace spw::job_detail {

std::string type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::table: return "table";
    case toml::node_type::array: return "array";
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "float";
    case toml::node_type::boolean: return "boolean";
    case toml::node_type::date: return "date";
    case toml::node_type::time: return "time";
    case toml::node_type::date_time: return "date-time";
    case toml::node_type::none: break;
  }
  return "nothing";
}

// Appends rather than writing "'" + key + "'": GCC 12 misreports that as overlapping memcpy
// (-Wrestrict) at -O3.
std::string single_quoted(std::string_view key) {
  std::string text(1, '\'');
  text.append(key).push_back('\'');
  return text;
}

std::string format_number(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

}  // namespace spw::job_detail
