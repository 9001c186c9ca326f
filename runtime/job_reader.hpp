// Typed reads of a parsed job file that name where a bad value came from: the file and line,
// or the --set that supplied it.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <toml++/toml.h>

#include "kernels/status.hpp"

namespace spw::job_detail {

// How a job file spells a value of an enum.
template <class E>
struct Spelling {
  std::string_view name;
  E value;
};

// "table", "integer", ...: what a node is, for messages.
std::string type_name(const toml::node& node);
std::string single_quoted(std::string_view key);
std::string format_number(double value);

// The override that last supplied each "section.key", labelled as its caller calls them
// ("--set train.lr=0.1"), so errors in overridden values name the override rather than a
// line of the file that no longer holds the value.
using Origins = std::map<std::string, std::string, std::less<>>;

enum class Bound { positive, non_negative, unit_interval };

// Typed, located reads from the parsed job: every failure is one config_error line that starts
// with where the offending value came from.
class JobReader {
 public:
  JobReader(const toml::table& doc, const std::string& source, const Origins& origins)
      : doc_(doc), source_(source), origins_(origins) {}

  // "section" or "section.key"; nullptr when the job does not set it.
  const toml::node* find(std::string_view key) const {
    const auto dot = key.find('.');
    const toml::node* section = doc_.get(key.substr(0, dot));
    if (dot == std::string_view::npos || section == nullptr) return section;
    const toml::table* table = section->as_table();
    return table != nullptr ? table->get(key.substr(dot + 1)) : nullptr;
  }

  bool is_set(std::string_view key) const { return find(key) != nullptr; }

  std::string where(std::string_view key, const toml::node* node) const {
    if (const auto origin = origins_.find(key); origin != origins_.end()) {
      return origin->second;
    }
    if (node != nullptr && node->source().begin.line > 0) {
      return source_ + ":" + std::to_string(node->source().begin.line);
    }
    return source_;
  }

  Status fail(std::string_view key, const toml::node* node, const std::string& message) const {
    return error(StatusCode::config_error, where(key, node) + ": " + message);
  }
  Status fail(std::string_view key, const std::string& message) const {
    return fail(key, find(key), message);
  }
  // For a clash between values: blames the first of `keys` that a --set supplied (the newest
  // change), else the first the file sets, never a default the user did not write.
  Status fail_at(std::initializer_list<std::string_view> keys, const std::string& message) const {
    for (std::string_view key : keys) {
      if (origins_.find(key) != origins_.end()) return fail(key, message);
    }
    for (std::string_view key : keys) {
      if (is_set(key)) return fail(key, message);
    }
    return error(StatusCode::config_error, source_ + ": " + message);
  }

  template <class Int>
  Status integer(std::string_view key, const std::string& label, const toml::node& node, Int& out,
                 std::int64_t min) const {
    const auto* value = node.as_integer();
    if (value == nullptr) {
      return fail(key, &node, single_quoted(label) + " must be an integer, got " + type_name(node));
    }
    const std::int64_t number = value->get();
    if (number < min) {
      return fail(key, &node,
                  single_quoted(label) + " must be at least " + std::to_string(min) + ", got " +
                      std::to_string(number));
    }
    if (std::cmp_greater(number, std::numeric_limits<Int>::max())) {
      return fail(key, &node,
                  single_quoted(label) + " must be at most " +
                      std::to_string(std::numeric_limits<Int>::max()) + ", got " +
                      std::to_string(number));
    }
    out = static_cast<Int>(number);
    return Status::success();
  }

  template <class Int>
  Status read_integer(std::string_view key, Int& out, std::int64_t min) const {
    const toml::node* node = find(key);
    return node != nullptr ? integer(key, std::string(key), *node, out, min) : Status::success();
  }

  template <class Int>
  Status read_optional_integer(std::string_view key, std::optional<Int>& out,
                               std::int64_t min) const {
    if (!is_set(key)) return Status::success();
    Int value{};
    SPW_TRY(read_integer(key, value, min));
    out = value;
    return Status::success();
  }

  Status read_integer_array(std::string_view key, std::vector<int>& out, std::int64_t min) const {
    const toml::node* node = find(key);
    if (node == nullptr) return Status::success();
    const toml::array* array = node->as_array();
    if (array == nullptr) {
      return fail(key, node,
                  single_quoted(key) + " must be an array of integers, got " + type_name(*node));
    }
    out.clear();
    for (std::size_t i = 0; i < array->size(); ++i) {
      int value = 0;
      const std::string label = std::string(key) + "[" + std::to_string(i) + "]";
      SPW_TRY(integer(key, label, *array->get(i), value, min));
      out.push_back(value);
    }
    return Status::success();
  }

  // TOML writes `lr = 1` as an integer; a number is what is meant, so integers are accepted.
  Status read_number(std::string_view key, double& out, Bound bound) const {
    const toml::node* node = find(key);
    if (node == nullptr) return Status::success();
    double value = 0;
    if (const auto* floating = node->as_floating_point()) {
      value = floating->get();
    } else if (const auto* integral = node->as_integer()) {
      value = static_cast<double>(integral->get());
    } else {
      return fail(key, node, single_quoted(key) + " must be a number, got " + type_name(*node));
    }
    // Written so that NaN fails every bound.
    bool in_range = std::isfinite(value);
    const char* requirement = "";
    switch (bound) {
      case Bound::positive:
        in_range = in_range && value > 0;
        requirement = "greater than 0";
        break;
      case Bound::non_negative:
        in_range = in_range && value >= 0;
        requirement = "at least 0";
        break;
      case Bound::unit_interval:
        in_range = in_range && value >= 0 && value < 1;
        requirement = "in [0, 1)";
        break;
    }
    if (!in_range) {
      return fail(key, node,
                  single_quoted(key) + " must be " + requirement + ", got " + format_number(value));
    }
    out = value;
    return Status::success();
  }

  Status read_bool(std::string_view key, bool& out) const {
    const toml::node* node = find(key);
    if (node == nullptr) return Status::success();
    const auto* value = node->as_boolean();
    if (value == nullptr) {
      return fail(key, node,
                  single_quoted(key) + " must be true or false, got " + type_name(*node));
    }
    out = value->get();
    return Status::success();
  }

  Status read_string(std::string_view key, std::string& out) const {
    const toml::node* node = find(key);
    if (node == nullptr) return Status::success();
    const auto* value = node->as_string();
    if (value == nullptr) {
      return fail(key, node, single_quoted(key) + " must be a string, got " + type_name(*node));
    }
    out = value->get();
    return Status::success();
  }

  template <class E, std::size_t N>
  Status read_enum(std::string_view key, const Spelling<E> (&options)[N], E& out) const {
    const toml::node* node = find(key);
    if (node == nullptr) return Status::success();
    const auto* value = node->as_string();
    if (value != nullptr) {
      for (const auto& option : options) {
        if (option.name == value->get()) {
          out = option.value;
          return Status::success();
        }
      }
    }
    std::string allowed;
    for (std::size_t i = 0; i < N; ++i) {
      if (i > 0) allowed += i + 1 == N ? " or " : ", ";
      allowed.append(1, '"').append(options[i].name).append(1, '"');
    }
    const std::string got = value != nullptr ? "\"" + value->get() + "\"" : type_name(*node);
    return fail(key, node, single_quoted(key) + " must be one of " + allowed + ", got " + got);
  }

 private:
  const toml::table& doc_;
  const std::string& source_;
  const Origins& origins_;
};

}  // namespace spw::job_detail
