#include "runtime/pipeline_checkpoint.hpp"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "runtime/checkpoint.hpp"
#include "runtime/mpi_support.hpp"

namespace spw {
namespace {

// ---- names and shapes as bytes, for the trip to rank 0 ------------------------------------

void put_int(std::vector<char>& out, std::int64_t value) {
  const char* bytes = reinterpret_cast<const char*>(&value);
  out.insert(out.end(), bytes, bytes + sizeof value);
}

void put_specs(std::vector<char>& out, const std::vector<CheckpointTensorSpec>& specs) {
  put_int(out, static_cast<std::int64_t>(specs.size()));
  for (const CheckpointTensorSpec& spec : specs) {
    put_int(out, static_cast<std::int64_t>(spec.name.size()));
    out.insert(out.end(), spec.name.begin(), spec.name.end());
    put_int(out, static_cast<std::int64_t>(spec.shape.size()));
    for (const std::int64_t d : spec.shape) put_int(out, d);
    put_int(out, static_cast<std::int64_t>(spec.rows.size()));
    for (const RowRange& r : spec.rows) {
      put_int(out, r.begin);
      put_int(out, r.end);
    }
  }
}

// Reads what put_specs wrote; false when the bytes run out, which only a bug can cause.
class SpecReader {
 public:
  SpecReader(const char* begin, const char* end) : at_(begin), end_(end) {}

  bool get_int(std::int64_t& value) {
    if (end_ - at_ < static_cast<std::ptrdiff_t>(sizeof value)) return false;
    std::memcpy(&value, at_, sizeof value);
    at_ += sizeof value;
    return true;
  }

  bool get_specs(std::vector<CheckpointTensorSpec>& specs) {
    std::int64_t count = 0;
    if (!get_int(count)) return false;
    for (std::int64_t i = 0; i < count; ++i) {
      CheckpointTensorSpec spec;
      std::int64_t length = 0;
      if (!get_int(length) || length < 0 || end_ - at_ < length) return false;
      spec.name.assign(at_, static_cast<std::size_t>(length));
      at_ += length;
      std::int64_t rank = 0;
      if (!get_int(rank) || rank < 0) return false;
      spec.shape.resize(static_cast<std::size_t>(rank));
      for (std::int64_t& d : spec.shape) {
        if (!get_int(d)) return false;
      }
      std::int64_t ranges = 0;
      if (!get_int(ranges) || ranges < 0) return false;
      spec.rows.resize(static_cast<std::size_t>(ranges));
      for (RowRange& r : spec.rows) {
        if (!get_int(r.begin) || !get_int(r.end)) return false;
      }
      specs.push_back(std::move(spec));
    }
    return true;
  }

 private:
  const char* at_;
  const char* end_;
};

// Every rank's bytes, on rank 0 (empty elsewhere).
Result<std::vector<std::vector<char>>> gather_bytes(MPI_Comm world, const std::vector<char>& mine) {
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  const int my_count = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<std::size_t>(size), 0);
  SPW_TRY(mpi_check(MPI_Gather(&my_count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, world),
                    "gathering checkpoint outlines"));
  std::vector<int> displacements(counts.size(), 0);
  for (std::size_t i = 1; i < counts.size(); ++i) {
    displacements[i] = displacements[i - 1] + counts[i - 1];
  }
  std::vector<char> all(rank == 0 ? static_cast<std::size_t>(displacements.back() + counts.back())
                                  : 0);
  SPW_TRY(mpi_check(MPI_Gatherv(mine.data(), my_count, MPI_CHAR, all.data(), counts.data(),
                                displacements.data(), MPI_CHAR, 0, world),
                    "gathering checkpoint outlines"));
  std::vector<std::vector<char>> per_rank;
  if (rank == 0) {
    for (std::size_t r = 0; r < counts.size(); ++r) {
      const char* begin = all.data() + displacements[r];
      per_rank.emplace_back(begin, begin + counts[r]);
    }
  }
  return per_rank;
}

// What rank 0 lays out: the whole outline, and which of its offsets go to which rank.
struct WholeFile {
  CheckpointOutline outline;
  std::vector<std::int64_t> parameter_counts;  // [rank]
  std::vector<std::int64_t> optimizer_counts;  // [rank] parameters with optimizer state
};

Result<WholeFile> merge_outlines(const CheckpointOutline& rank0,
                                 const std::vector<std::vector<char>>& described) {
  WholeFile whole;
  whole.outline = rank0;
  whole.outline.parameters.clear();
  whole.outline.optimizer_parameters.clear();
  for (const std::vector<char>& bytes : described) {
    SpecReader reader(bytes.data(), bytes.data() + bytes.size());
    const std::size_t parameters = whole.outline.parameters.size();
    const std::size_t optimized = whole.outline.optimizer_parameters.size();
    if (!reader.get_specs(whole.outline.parameters) ||
        !reader.get_specs(whole.outline.optimizer_parameters)) {
      return error(StatusCode::internal, "a rank sent a malformed checkpoint outline");
    }
    whole.parameter_counts.push_back(
        static_cast<std::int64_t>(whole.outline.parameters.size() - parameters));
    whole.optimizer_counts.push_back(
        static_cast<std::int64_t>(whole.outline.optimizer_parameters.size() - optimized));
  }
  return whole;
}

// create_checkpoint_skeleton lists all parameters, then all optimizer state; each rank gets
// its parameters' offsets followed by its optimizer state's, as checkpoint_regions expects.
std::vector<std::int64_t> offsets_by_rank(const WholeFile& whole,
                                          const std::vector<std::int64_t>& offsets,
                                          std::vector<int>& counts) {
  const auto states = static_cast<std::int64_t>(whole.outline.state_names.size());
  const auto all_parameters = static_cast<std::int64_t>(whole.outline.parameters.size());
  std::vector<std::int64_t> ordered;
  std::int64_t parameter = 0;
  std::int64_t optimized = 0;
  for (std::size_t r = 0; r < whole.parameter_counts.size(); ++r) {
    const auto begin = ordered.size();
    for (std::int64_t i = 0; i < whole.parameter_counts[r]; ++i) {
      ordered.push_back(offsets[static_cast<std::size_t>(parameter++)]);
    }
    for (std::int64_t i = 0; i < whole.optimizer_counts[r] * states; ++i) {
      ordered.push_back(offsets[static_cast<std::size_t>(all_parameters + optimized++)]);
    }
    counts.push_back(static_cast<int>(ordered.size() - begin));
  }
  return ordered;
}

// Rank 0 of `world` lays the file out from its own outline, optimizer settings included,
// so it must be a rank that writes.
Status save_in_order(PipelineExecutor& executor, MPI_Comm world, const std::string& path,
                     const std::string& config_json) {
  const std::string context = "writing checkpoint " + path;
  int rank = 0;
  MPI_Comm_rank(world, &rank);

  // Replicas hold the same values: replica 0 alone writes, and world rank 0 belongs to it.
  // Under PipeFB a forward rank's parameters copy its backward rank's, which writes them.
  const bool writes = executor.replica() == 0 && executor.owns_parameters();
  std::vector<NamedParameter> params;
  const Optimizer* optimizer = nullptr;
  if (writes) {
    params = executor.local_parameters();
    optimizer = &executor.optimizer();
  }
  CheckpointMeta meta;
  meta.step = executor.steps_done();
  meta.data_position = meta.step * executor.settings().train.batch;
  meta.config_json = config_json;
  const CheckpointOutline mine = checkpoint_outline(params, optimizer, meta);

  long long pid = ::getpid();
  SPW_TRY(mpi_check(MPI_Bcast(&pid, 1, MPI_LONG_LONG, 0, world), "naming the checkpoint file"));
  const std::string temporary = path + ".tmp." + std::to_string(pid);

  std::vector<char> described;
  put_specs(described, mine.parameters);
  put_specs(described, mine.optimizer_parameters);
  SPW_ASSIGN_OR_RETURN(std::vector<std::vector<char>> outlines, gather_bytes(world, described));

  std::vector<std::int64_t> ordered;
  std::vector<int> counts;
  Status laid_out = Status::success();
  if (rank == 0) {
    auto whole = merge_outlines(mine, outlines);
    laid_out = whole.status();
    if (whole.ok()) {
      auto offsets = create_checkpoint_skeleton(temporary, whole->outline);
      laid_out = offsets.status();
      if (offsets.ok()) ordered = offsets_by_rank(*whole, *offsets, counts);
    }
  }
  SPW_TRY(agree_on_status(world, laid_out.with_context(context)));

  std::vector<int> displacements(counts.size(), 0);
  for (std::size_t i = 1; i < counts.size(); ++i) {
    displacements[i] = displacements[i - 1] + counts[i - 1];
  }
  const std::size_t my_count =
      params.size() + (optimizer != nullptr
                           ? optimizer->parameters().size() * optimizer->state_names().size()
                           : 0);
  std::vector<std::int64_t> my_offsets(my_count);
  Status written = mpi_check(
      MPI_Scatterv(ordered.data(), counts.data(), displacements.data(), MPI_INT64_T,
                   my_offsets.data(), static_cast<int>(my_count), MPI_INT64_T, 0, world),
      "sending checkpoint offsets");
  if (written.ok() && writes) {
    auto regions = checkpoint_regions(params, optimizer, my_offsets);
    written = regions.status();
    if (regions.ok()) written = write_checkpoint_tensors(temporary, *regions);
  }
  Status status = agree_on_status(world, written.with_context(context));
  if (status.ok()) {
    const Status published = rank == 0 ? publish_checkpoint(temporary, path) : Status::success();
    status = agree_on_status(world, published.with_context(context));
  }
  // Every rank has closed the file by now (or never opened it).
  if (!status.ok() && rank == 0) std::remove(temporary.c_str());
  return status;
}

}  // namespace

Status save_pipeline_checkpoint(PipelineExecutor& executor, MPI_Comm world,
                                const std::string& path, const std::string& config_json) {
  // Under PipeFB world rank 0 runs forwards and holds no optimizer: put writers first.
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  const bool writes = executor.replica() == 0 && executor.owns_parameters();
  MPI_Comm writers_first = MPI_COMM_NULL;
  SPW_TRY(mpi_check(MPI_Comm_split(world, 0, (writes ? 0 : size) + rank, &writers_first),
                    "ordering ranks for the checkpoint"));
  const Status status = save_in_order(executor, writers_first, path, config_json);
  MPI_Comm_free(&writers_first);
  return status;
}

Status load_pipeline_checkpoint(PipelineExecutor& executor, MPI_Comm world,
                                const std::string& path) {
  const std::vector<NamedParameter> params = executor.local_parameters();
  auto load = CheckpointLoad::prepare(
      path, params, executor.owns_parameters() ? &executor.optimizer() : nullptr);
  Status checked = load.status();
  if (checked.ok() && (*load)->meta().step < 0) {
    checked = error(StatusCode::invalid_argument,
                    "checkpoint " + path + ": step " + std::to_string((*load)->meta().step) +
                        " is negative");
  }
  SPW_TRY(agree_on_status(world, checked));
  Status loaded = (*load)->apply();
  if (loaded.ok()) executor.set_steps_done((*load)->meta().step);
  return agree_on_status(world, loaded);
}

}  // namespace spw
