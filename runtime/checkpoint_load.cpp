// Loading checkpoints (checkpoint.hpp): every dataset is checked before any tensor changes.
#include <hdf5.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <utility>

#include "runtime/checkpoint.hpp"
#include "runtime/checkpoint_format.hpp"
#include "runtime/hdf5_support.hpp"

namespace spw {

using checkpoint_format::check_names;
using checkpoint_format::dataset_name;
using checkpoint_format::kFormatVersion;
using checkpoint_format::kMetaGroup;
using checkpoint_format::kOptimizerGroup;

namespace {

// A dataset that passed every check, waiting to be read into its tensor.
struct PendingRead {
  Hid dataset;
  Tensor* target;
  std::string label;
  std::vector<RowRange> rows;  // of the dataset, into the target in order; empty: all of it
};

std::string shape_text(const std::vector<hsize_t>& dims) {
  std::string text = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(dims[i]);
  }
  return text + "]";
}

std::string type_text(hid_t type) {
  const std::string bits = std::to_string(8 * H5Tget_size(type));
  switch (H5Tget_class(type)) {
    case H5T_FLOAT: return "float" + bits;
    case H5T_INTEGER: return (H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + bits;
    case H5T_STRING: return "string";
    case H5T_COMPOUND: return "compound";
    default: return "a non-numeric type";
  }
}

class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path) {}

  Status open() {
    std::error_code ec;
    const bool exists = std::filesystem::exists(path_, ec);
    if (ec)
      return error(StatusCode::io_error, "cannot access checkpoint " + path_ + ": " + ec.message());
    if (!exists) return error(StatusCode::not_found, "checkpoint " + path_ + " does not exist");
    file_ = Hid(H5Fopen(path_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    if (!file_.valid()) {
      const std::string reason = hdf5_reason();
      return error(StatusCode::io_error,
                   "checkpoint " + path_ + " cannot be opened as an HDF5 file (" + reason + ")");
    }
    return Status::success();
  }

  hid_t file() const { return file_.get(); }

  Result<bool> has_link(hid_t loc, const std::string& name) {
    const htri_t exists = H5Lexists(loc, name.c_str(), H5P_DEFAULT);
    if (exists < 0) return hdf5_error("checkpoint " + path_ + ": looking up '" + name + "'");
    return exists > 0;
  }

  Result<Hid> open_group(hid_t loc, const std::string& name, const std::string& label) {
    SPW_ASSIGN_OR_RETURN(const bool exists, has_link(loc, name));
    if (!exists) {
      return error(StatusCode::not_found, "checkpoint " + path_ + " has no group '" + label + "'");
    }
    Hid group(H5Gopen2(loc, name.c_str(), H5P_DEFAULT), H5Gclose);
    if (!group.valid())
      return hdf5_error("checkpoint " + path_ + ": opening group '" + label + "'");
    return group;
  }

  // Checks that `name` under `loc` is a float32 dataset shaped like `target` (or, for a part,
  // like the whole tensor), and queues it.
  Status expect(hid_t loc, const std::string& name, const std::string& label, Tensor* target,
                const TensorPart* part = nullptr) {
    SPW_ASSIGN_OR_RETURN(const bool exists, has_link(loc, name));
    if (!exists) {
      return error(StatusCode::not_found,
                   "checkpoint " + path_ + " has no dataset '" + label + "'");
    }
    Hid dataset(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), H5Dclose);
    if (!dataset.valid()) {
      hdf5_reason();
      return error(StatusCode::invalid_argument,
                   "checkpoint " + path_ + ": '" + label + "' is not a dataset");
    }
    Hid type(H5Dget_type(dataset.get()), H5Tclose);
    Hid space(H5Dget_space(dataset.get()), H5Sclose);
    if (!type.valid() || !space.valid()) {
      return hdf5_error("checkpoint " + path_ + ": inspecting dataset '" + label + "'");
    }
    if (H5Tget_class(type.get()) != H5T_FLOAT || H5Tget_size(type.get()) != sizeof(float)) {
      return error(StatusCode::invalid_argument, "checkpoint " + path_ + ": dataset '" + label +
                                                     "' has type " + type_text(type.get()) +
                                                     " but the model expects float32");
    }
    if (H5Sget_simple_extent_type(space.get()) == H5S_NULL) {
      return error(StatusCode::shape_mismatch,
                   "checkpoint " + path_ + ": dataset '" + label + "' holds no data");
    }
    const int rank = H5Sget_simple_extent_ndims(space.get());
    std::vector<hsize_t> dims(rank > 0 ? static_cast<std::size_t>(rank) : 0);
    if (rank < 0 ||
        (rank > 0 && H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0)) {
      return hdf5_error("checkpoint " + path_ + ": reading the shape of '" + label + "'");
    }
    std::vector<hsize_t> expected;
    if (part != nullptr) {
      expected.assign(part->whole_shape.begin(), part->whole_shape.end());
    } else {
      for (int i = 0; i < target->shape().rank(); ++i) expected.push_back(target->shape()[i]);
    }
    if (dims != expected) {
      return error(StatusCode::shape_mismatch, "checkpoint " + path_ + ": dataset '" + label +
                                                   "' has shape " + shape_text(dims) +
                                                   " but the model expects " +
                                                   shape_text(expected));
    }
    pending_.push_back(
        {std::move(dataset), target, label, part ? part->rows : std::vector<RowRange>{}});
    return Status::success();
  }

  // Reads every queued dataset; the only step that writes into tensors.
  Status read_all() {
    for (PendingRead& read : pending_) {
      if (read.target->numel() == 0) continue;
      Hid file_space, memory_space;
      if (!read.rows.empty()) SPW_TRY(select_rows(read, file_space, memory_space));
      if (H5Dread(read.dataset.get(), H5T_NATIVE_FLOAT,
                  memory_space.valid() ? memory_space.get() : H5S_ALL,
                  file_space.valid() ? file_space.get() : H5S_ALL, H5P_DEFAULT,
                  read.target->data()) < 0) {
        return hdf5_error("checkpoint " + path_ + ": reading dataset '" + read.label + "'");
      }
    }
    pending_.clear();
    return Status::success();
  }

  Result<bool> has_attribute(hid_t loc, const char* name) {
    const htri_t exists = H5Aexists(loc, name);
    if (exists < 0) return hdf5_error("checkpoint " + path_ + ": looking up attribute " + name);
    return exists > 0;
  }

  Result<Hid> open_attribute(hid_t loc, const char* name, const std::string& where,
                             H5T_class_t type_class) {
    SPW_ASSIGN_OR_RETURN(const bool exists, has_attribute(loc, name));
    if (!exists) {
      return error(StatusCode::not_found, "checkpoint " + path_ + ": group '" + where +
                                              "' has no attribute '" + name + "'");
    }
    Hid attribute(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose);
    Hid type(attribute.valid() ? H5Aget_type(attribute.get()) : H5I_INVALID_HID, H5Tclose);
    if (!type.valid()) return hdf5_error("checkpoint " + path_ + ": opening attribute " + name);
    if (H5Tget_class(type.get()) != type_class) {
      return error(StatusCode::invalid_argument, "checkpoint " + path_ + ": attribute '" + where +
                                                     "/" + name + "' has type " +
                                                     type_text(type.get()));
    }
    return attribute;
  }

  Result<std::int64_t> read_int(hid_t loc, const char* name, const std::string& where) {
    SPW_ASSIGN_OR_RETURN(Hid attribute, open_attribute(loc, name, where, H5T_INTEGER));
    std::int64_t value = 0;
    if (H5Aread(attribute.get(), H5T_NATIVE_INT64, &value) < 0) {
      return hdf5_error("checkpoint " + path_ + ": reading attribute " + name);
    }
    return value;
  }

  // Variable-length (what spillway and h5py write) or fixed-length (numpy bytes) strings.
  Result<std::string> read_string(hid_t loc, const char* name, const std::string& where) {
    SPW_ASSIGN_OR_RETURN(Hid attribute, open_attribute(loc, name, where, H5T_STRING));
    Hid file_type(H5Aget_type(attribute.get()), H5Tclose);
    Hid memory_type(H5Tcopy(H5T_C_S1), H5Tclose);
    const htri_t variable = file_type.valid() ? H5Tis_variable_str(file_type.get()) : -1;
    const std::size_t size = file_type.valid() ? H5Tget_size(file_type.get()) : 0;
    if (!memory_type.valid() || variable < 0 ||
        H5Tset_size(memory_type.get(), variable > 0 ? H5T_VARIABLE : size) < 0 ||
        H5Tset_cset(memory_type.get(), H5Tget_cset(file_type.get())) < 0) {
      return hdf5_error("checkpoint " + path_ + ": reading attribute " + name);
    }
    std::string value;
    if (variable > 0) {
      char* text = nullptr;
      if (H5Aread(attribute.get(), memory_type.get(), &text) < 0) {
        return hdf5_error("checkpoint " + path_ + ": reading attribute " + name);
      }
      if (text != nullptr) value = text;
      H5free_memory(text);
    } else {
      value.assign(size, '\0');
      if (H5Aread(attribute.get(), memory_type.get(), value.data()) < 0) {
        return hdf5_error("checkpoint " + path_ + ": reading attribute " + name);
      }
      value.resize(std::strlen(value.c_str()));
    }
    return value;
  }

  const std::string& path() const { return path_; }

 private:
  // The part's rows of the dataset, read in file order (ascending rows) into the whole target.
  Status select_rows(const PendingRead& read, Hid& file_space, Hid& memory_space) {
    file_space = Hid(H5Dget_space(read.dataset.get()), H5Sclose);
    const int rank = file_space.valid() ? H5Sget_simple_extent_ndims(file_space.get()) : -1;
    std::vector<hsize_t> dims(rank > 0 ? static_cast<std::size_t>(rank) : 0);
    if (rank < 1 || H5Sget_simple_extent_dims(file_space.get(), dims.data(), nullptr) < 0) {
      return hdf5_error("checkpoint " + path_ + ": selecting rows of '" + read.label + "'");
    }
    std::vector<hsize_t> start(dims.size(), 0), count = dims;
    bool first = true;
    for (const RowRange& r : read.rows) {
      start[0] = static_cast<hsize_t>(r.begin);
      count[0] = static_cast<hsize_t>(r.end - r.begin);
      if (H5Sselect_hyperslab(file_space.get(), first ? H5S_SELECT_SET : H5S_SELECT_OR,
                              start.data(), nullptr, count.data(), nullptr) < 0) {
        return hdf5_error("checkpoint " + path_ + ": selecting rows of '" + read.label + "'");
      }
      first = false;
    }
    std::vector<hsize_t> target_dims;
    for (int i = 0; i < read.target->shape().rank(); ++i) {
      target_dims.push_back(static_cast<hsize_t>(read.target->shape()[i]));
    }
    memory_space = Hid(H5Screate_simple(static_cast<int>(target_dims.size()), target_dims.data(),
                                        nullptr),
                       H5Sclose);
    if (!memory_space.valid()) {
      return hdf5_error("checkpoint " + path_ + ": selecting rows of '" + read.label + "'");
    }
    return Status::success();
  }

  std::string path_;
  Hid file_;
  std::vector<PendingRead> pending_;  // declared after file_: closed before it
};

Status expect_parameters(Reader& reader, const std::vector<NamedParameter>& params) {
  for (const NamedParameter& p : params) {
    SPW_TRY(reader.expect(reader.file(), dataset_name(p), dataset_name(p), p.value,
                          p.part ? &*p.part : nullptr));
  }
  return Status::success();
}

// Queues the optimizer's state and returns the saved step.
Result<std::int64_t> expect_optimizer(Reader& reader, Optimizer& optimizer) {
  SPW_ASSIGN_OR_RETURN(const bool exists, reader.has_link(reader.file(), kOptimizerGroup));
  if (!exists) {
    return error(StatusCode::not_found,
                 "checkpoint " + reader.path() + " has no optimizer state (group 'optimizer')");
  }
  SPW_ASSIGN_OR_RETURN(Hid group,
                       reader.open_group(reader.file(), kOptimizerGroup, kOptimizerGroup));
  SPW_ASSIGN_OR_RETURN(const std::string kind,
                       reader.read_string(group.get(), "kind", kOptimizerGroup));
  if (kind != optimizer.settings().kind) {
    return error(StatusCode::invalid_argument, "checkpoint " + reader.path() + " holds " + kind +
                                                   " optimizer state but the optimizer is " +
                                                   optimizer.settings().kind);
  }
  SPW_ASSIGN_OR_RETURN(const std::int64_t step,
                       reader.read_int(group.get(), "step", kOptimizerGroup));
  if (step < 0) {
    return error(StatusCode::invalid_argument, "checkpoint " + reader.path() + ": optimizer step " +
                                                   std::to_string(step) + " is negative");
  }
  const auto& names = optimizer.state_names();
  for (std::size_t i = 0; i < optimizer.parameters().size() && !names.empty(); ++i) {
    const NamedParameter& parameter = optimizer.parameters()[i];
    const std::string& name = dataset_name(parameter);
    const std::string prefix = std::string(kOptimizerGroup) + "/" + name;
    SPW_ASSIGN_OR_RETURN(const bool has_state, reader.has_link(group.get(), name));
    if (!has_state) {
      return error(StatusCode::not_found, "checkpoint " + reader.path() + " has no dataset '" +
                                              prefix + "/" + names[0] + "'");
    }
    SPW_ASSIGN_OR_RETURN(Hid sub, reader.open_group(group.get(), name, prefix));
    for (std::size_t slot = 0; slot < names.size(); ++slot) {
      SPW_TRY(reader.expect(sub.get(), names[slot], prefix + "/" + names[slot],
                            &optimizer.state(i, slot),
                            parameter.part ? &*parameter.part : nullptr));
    }
  }
  return step;
}

Result<CheckpointMeta> read_meta(Reader& reader) {
  SPW_ASSIGN_OR_RETURN(Hid group, reader.open_group(reader.file(), kMetaGroup, kMetaGroup));
  SPW_ASSIGN_OR_RETURN(const bool versioned, reader.has_attribute(group.get(), "format_version"));
  if (versioned) {
    SPW_ASSIGN_OR_RETURN(const std::int64_t version,
                         reader.read_int(group.get(), "format_version", kMetaGroup));
    if (version > kFormatVersion) {
      return error(StatusCode::unsupported, "checkpoint " + reader.path() + " has format version " +
                                                std::to_string(version) +
                                                "; this spillway reads up to version " +
                                                std::to_string(kFormatVersion));
    }
  }
  CheckpointMeta meta;
  SPW_ASSIGN_OR_RETURN(meta.step, reader.read_int(group.get(), "step", kMetaGroup));
  SPW_ASSIGN_OR_RETURN(meta.data_position,
                       reader.read_int(group.get(), "data_position", kMetaGroup));
  SPW_ASSIGN_OR_RETURN(meta.config_json,
                       reader.read_string(group.get(), "config_json", kMetaGroup));
  return meta;
}

}  // namespace

Status load_parameters(const std::string& path, const std::vector<NamedParameter>& params) {
  SPW_TRY(check_names(params).with_context("loading checkpoint " + path));
  const QuietHdf5 quiet;
  Reader reader(path);
  SPW_TRY(reader.open());
  SPW_TRY(expect_parameters(reader, params));
  return reader.read_all();
}

struct CheckpointLoad::State {
  explicit State(const std::string& path) : reader(path) {}
  Reader reader;
  Optimizer* optimizer = nullptr;
  std::int64_t optimizer_step = 0;
  CheckpointMeta meta;
};

CheckpointLoad::CheckpointLoad() = default;
CheckpointLoad::~CheckpointLoad() {
  const QuietHdf5 quiet;  // closing the file must not print either
  state_.reset();
}

Result<std::unique_ptr<CheckpointLoad>> CheckpointLoad::prepare(
    const std::string& path, const std::vector<NamedParameter>& params, Optimizer* optimizer) {
  SPW_TRY(check_names(params).with_context("loading checkpoint " + path));
  if (optimizer != nullptr) {
    SPW_TRY(check_names(optimizer->parameters()).with_context("loading checkpoint " + path));
  }
  const QuietHdf5 quiet;
  auto load = std::unique_ptr<CheckpointLoad>(new CheckpointLoad());
  load->state_ = std::make_unique<State>(path);
  State& state = *load->state_;
  SPW_TRY(state.reader.open());
  SPW_TRY(expect_parameters(state.reader, params));
  if (optimizer != nullptr) {
    SPW_ASSIGN_OR_RETURN(state.optimizer_step, expect_optimizer(state.reader, *optimizer));
  }
  state.optimizer = optimizer;
  SPW_ASSIGN_OR_RETURN(state.meta, read_meta(state.reader));
  return load;
}

const CheckpointMeta& CheckpointLoad::meta() const { return state_->meta; }

Status CheckpointLoad::apply() {
  const QuietHdf5 quiet;
  SPW_TRY(state_->reader.read_all());
  if (state_->optimizer != nullptr) SPW_TRY(state_->optimizer->set_step(state_->optimizer_step));
  return Status::success();
}

Result<CheckpointMeta> read_checkpoint_meta(const std::string& path) {
  const QuietHdf5 quiet;
  Reader reader(path);
  SPW_TRY(reader.open());
  return read_meta(reader);
}

Status load_checkpoint(const std::string& path, const std::vector<NamedParameter>& params,
                       Optimizer* optimizer, CheckpointMeta& meta) {
  SPW_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointLoad> load,
                       CheckpointLoad::prepare(path, params, optimizer));
  SPW_TRY(load->apply());
  meta = load->meta();
  return Status::success();
}

}  // namespace spw
