#include "runtime/checkpoint_format.hpp"

#include <algorithm>
#include <map>
#include <unordered_set>

namespace spw::checkpoint_format {
namespace {

// Names become HDF5 link names at the root, next to the two groups of the layout.
Status check_name(const std::string& name, std::unordered_set<std::string>& seen) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
    return error(StatusCode::invalid_argument,
                 "parameter name '" + name + "' cannot name a checkpoint dataset");
  }
  if (name == kOptimizerGroup || name == kMetaGroup) {
    return error(StatusCode::invalid_argument,
                 "parameter name '" + name + "' is reserved for a checkpoint group");
  }
  if (!seen.insert(name).second) {
    return error(StatusCode::invalid_argument, "parameter '" + name + "' is listed twice");
  }
  return Status::success();
}

std::string rows_text(std::int64_t begin, std::int64_t end) {
  return std::to_string(begin) + ".." + std::to_string(end - 1);
}

// A part's rows must lie in its whole tensor, ascending, and add up to the part's own shape.
Status check_part(const NamedParameter& p) {
  const TensorPart& part = *p.part;
  const Shape& shape = p.value->shape();
  bool fits = shape.rank() > 0 && part.whole_shape.size() == static_cast<std::size_t>(shape.rank());
  for (int i = 1; fits && i < shape.rank(); ++i) {
    fits = part.whole_shape[static_cast<std::size_t>(i)] == shape[i];
  }
  std::int64_t rows = 0, after = 0;
  for (const RowRange& r : part.rows) {
    fits = fits && r.begin >= after && r.end > r.begin && r.end <= part.whole_shape[0];
    rows += r.end - r.begin;
    after = r.end;
  }
  if (!fits || part.rows.empty() || rows != shape[0]) {
    return error(StatusCode::invalid_argument,
                 "parameter '" + p.name + "' " + shape.to_string() +
                     " is not an ascending choice of rows of '" + part.whole + "'");
  }
  return Status::success();
}

}  // namespace

Status check_names(const std::vector<NamedParameter>& params) {
  std::unordered_set<std::string> seen;
  for (const NamedParameter& p : params) {
    SPW_TRY(check_name(p.name, seen));
    if (p.value == nullptr) {
      return error(StatusCode::invalid_argument, "parameter '" + p.name + "' has no tensor");
    }
    if (p.part) SPW_TRY(check_part(p));
  }
  return Status::success();
}

Status check_specs(const std::vector<CheckpointTensorSpec>& specs) {
  std::map<std::string, std::vector<const CheckpointTensorSpec*>> by_name;
  for (const CheckpointTensorSpec& spec : specs) by_name[spec.name].push_back(&spec);
  std::unordered_set<std::string> seen;
  for (const auto& [name, group] : by_name) {
    SPW_TRY(check_name(name, seen));
    if (group.size() == 1 && group.front()->rows.empty()) continue;
    std::vector<RowRange> rows;
    for (const CheckpointTensorSpec* spec : group) {
      if (spec->rows.empty()) {
        return error(StatusCode::invalid_argument, "parameter '" + name + "' is listed twice");
      }
      if (spec->shape != group.front()->shape || spec->shape.empty()) {
        return error(StatusCode::invalid_argument,
                     "the parts of checkpoint dataset '" + name + "' disagree on its shape");
      }
      rows.insert(rows.end(), spec->rows.begin(), spec->rows.end());
    }
    std::sort(rows.begin(), rows.end(),
              [](const RowRange& a, const RowRange& b) { return a.begin < b.begin; });
    std::int64_t next = 0;
    for (const RowRange& r : rows) {
      if (r.begin != next) {
        const bool overlap = r.begin < next;
        return error(StatusCode::invalid_argument,
                     "checkpoint dataset '" + name + "': rows " +
                         (overlap ? rows_text(r.begin, std::min(next, r.end)) +
                                        " are held by two parameters"
                                  : rows_text(next, r.begin) + " are held by no parameter"));
      }
      next = r.end;
    }
    if (next != group.front()->shape[0]) {
      return error(StatusCode::invalid_argument,
                   "checkpoint dataset '" + name + "': rows " +
                       rows_text(next, group.front()->shape[0]) + " are held by no parameter");
    }
  }
  return Status::success();
}

const std::string& dataset_name(const NamedParameter& p) {
  return p.part ? p.part->whole : p.name;
}

}  // namespace spw::checkpoint_format
