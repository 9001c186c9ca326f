// save_checkpoint and its steps (checkpoint.hpp). HDF5 1.10 frees a file whose closing
// flush failed yet keeps its identifier, and the next close of it, at process exit at the
// latest, crashes (HDFGroup/hdf5#2257, fixed in 1.14.1). A full disk or quota makes exactly
// that flush fail. So HDF5 does not write the checkpoint: it lays the file out in a scratch
// file in local memory (metadata only: datasets get their space allocated early and are
// never filled, so their regions stay holes that cost nothing), and spillway writes the
// bytes, metadata image and tensors, with POSIX calls whose every error it handles.
#include <fcntl.h>
#include <hdf5.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <utility>

#include "kernels/memory_ledger.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/checkpoint_format.hpp"
#include "runtime/hdf5_support.hpp"
#include "runtime/version.hpp"

namespace spw {

using checkpoint_format::check_names;
using checkpoint_format::check_specs;
using checkpoint_format::kFormat;
using checkpoint_format::kFormatVersion;
using checkpoint_format::kMetaGroup;
using checkpoint_format::kOptimizerGroup;

namespace {

Status errno_error(const std::string& what) {
  return error(StatusCode::io_error, what + ": " + std::strerror(errno));
}

// The file stores tensor bytes as they are in memory.
static_assert(std::endian::native == std::endian::little,
              "checkpoint datasets are little-endian float32");

std::int64_t elements_of(const std::vector<std::int64_t>& shape) {
  std::int64_t elements = 1;
  for (const std::int64_t extent : shape) elements *= extent;
  return elements;
}

struct Layout {
  Hid dataset_create;  // contiguous, allocated at creation, never filled
  std::vector<std::int64_t> offsets;  // per spec in outline order; -1 when it has no bytes
};

// The dataset's byte offset in the file, -1 when it has no bytes.
Result<std::int64_t> create_dataset(hid_t loc, const std::string& name, const std::string& label,
                                    const std::vector<std::int64_t>& shape, Layout& layout) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  const int rank = static_cast<int>(dims.size());
  // A PyTorch scalar (shape ()) is an HDF5 scalar dataspace, which h5py reads as shape ().
  Hid space(rank == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(rank, dims.data(), nullptr),
            H5Sclose);
  if (!space.valid()) return hdf5_error("creating the dataspace of '" + label + "'");
  Hid dataset(H5Dcreate2(loc, name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT,
                         layout.dataset_create.get(), H5P_DEFAULT),
              H5Dclose);
  if (!dataset.valid()) return hdf5_error("creating dataset '" + label + "'");
  std::int64_t offset = -1;
  if (elements_of(shape) > 0) {
    const haddr_t address = H5Dget_offset(dataset.get());
    if (address == HADDR_UNDEF) return hdf5_error("placing dataset '" + label + "'");
    offset = static_cast<std::int64_t>(address);
  }
  return offset;
}

Status write_attribute(hid_t loc, const char* name, hid_t file_type, hid_t memory_type,
                       const void* value) {
  Hid space(H5Screate(H5S_SCALAR), H5Sclose);
  if (!space.valid()) return hdf5_error(std::string("creating attribute '") + name + "'");
  Hid attribute(H5Acreate2(loc, name, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!attribute.valid() || H5Awrite(attribute.get(), memory_type, value) < 0) {
    return hdf5_error(std::string("writing attribute '") + name + "'");
  }
  return Status::success();
}

Status write_int(hid_t loc, const char* name, std::int64_t value) {
  return write_attribute(loc, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

Status write_double(hid_t loc, const char* name, double value) {
  return write_attribute(loc, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}

Status write_string(hid_t loc, const char* name, const std::string& value) {
  Hid type(H5Tcopy(H5T_C_S1), H5Tclose);
  if (!type.valid() || H5Tset_size(type.get(), H5T_VARIABLE) < 0 ||
      H5Tset_cset(type.get(), H5T_CSET_UTF8) < 0) {
    return hdf5_error("making a string type");
  }
  const char* text = value.c_str();
  return write_attribute(loc, name, type.get(), type.get(), &text);
}

Result<Hid> create_group(hid_t loc, const std::string& name) {
  Hid group(H5Gcreate2(loc, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  if (!group.valid()) return hdf5_error("creating group '" + name + "'");
  return group;
}

Status lay_out_optimizer(hid_t file, const CheckpointOutline& outline, Layout& layout) {
  SPW_ASSIGN_OR_RETURN(Hid group, create_group(file, kOptimizerGroup));
  const OptimizerSettings& s = outline.optimizer_settings;
  SPW_TRY(write_string(group.get(), "kind", s.kind));
  SPW_TRY(write_int(group.get(), "step", outline.optimizer_step));
  SPW_TRY(write_double(group.get(), "lr", s.lr));
  SPW_TRY(write_double(group.get(), "momentum", s.momentum));
  SPW_TRY(write_double(group.get(), "beta1", s.beta1));
  SPW_TRY(write_double(group.get(), "beta2", s.beta2));
  SPW_TRY(write_double(group.get(), "eps", s.eps));
  SPW_TRY(write_double(group.get(), "weight_decay", s.weight_decay));
  std::map<std::string, std::vector<std::int64_t>> created;  // the parts of a dataset share it
  for (const CheckpointTensorSpec& p : outline.optimizer_parameters) {
    auto [at, first] = created.try_emplace(p.name);
    if (first) {
      SPW_ASSIGN_OR_RETURN(Hid sub, create_group(group.get(), p.name));
      for (const std::string& state : outline.state_names) {
        SPW_ASSIGN_OR_RETURN(
            const std::int64_t offset,
            create_dataset(sub.get(), state,
                           std::string(kOptimizerGroup) + "/" + p.name + "/" + state, p.shape,
                           layout));
        at->second.push_back(offset);
      }
    }
    layout.offsets.insert(layout.offsets.end(), at->second.begin(), at->second.end());
  }
  return Status::success();
}

Status lay_out_meta(hid_t file, const CheckpointMeta& meta) {
  SPW_ASSIGN_OR_RETURN(Hid group, create_group(file, kMetaGroup));
  SPW_TRY(write_string(group.get(), "format", kFormat));
  SPW_TRY(write_int(group.get(), "format_version", kFormatVersion));
  SPW_TRY(write_string(group.get(), "spillway_version", version_string()));
  SPW_TRY(write_int(group.get(), "step", meta.step));
  SPW_TRY(write_int(group.get(), "data_position", meta.data_position));
  SPW_TRY(write_string(group.get(), "config_json", meta.config_json));
  return Status::success();
}

// Builds the whole file except tensor bytes in `image_path` and returns where those go.
Result<std::vector<std::int64_t>> lay_out(const std::string& image_path,
                                          const CheckpointOutline& outline) {
  Layout layout{Hid(H5Pcreate(H5P_DATASET_CREATE), H5Pclose), {}};
  if (!layout.dataset_create.valid() ||
      H5Pset_layout(layout.dataset_create.get(), H5D_CONTIGUOUS) < 0 ||
      H5Pset_alloc_time(layout.dataset_create.get(), H5D_ALLOC_TIME_EARLY) < 0 ||
      H5Pset_fill_time(layout.dataset_create.get(), H5D_FILL_TIME_NEVER) < 0) {
    return hdf5_error("making the dataset creation properties");
  }
  Hid file(H5Fcreate(image_path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  if (!file.valid()) return hdf5_error("creating the HDF5 layout in " + image_path);
  std::map<std::string, std::int64_t> created;  // the parts of a dataset share it
  for (const CheckpointTensorSpec& p : outline.parameters) {
    auto [at, first] = created.try_emplace(p.name, -1);
    if (first) {
      SPW_ASSIGN_OR_RETURN(at->second, create_dataset(file.get(), p.name, p.name, p.shape, layout));
    }
    layout.offsets.push_back(at->second);
  }
  if (outline.has_optimizer) SPW_TRY(lay_out_optimizer(file.get(), outline, layout));
  SPW_TRY(lay_out_meta(file.get(), outline.meta));
  if (file.close() < 0) return hdf5_error("closing the HDF5 layout in " + image_path);
  return std::move(layout.offsets);
}

// A file descriptor that closes itself; close() reports the error NFS may keep until then.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { close(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int close() {
    const int result = fd_ >= 0 ? ::close(fd_) : 0;
    fd_ = -1;
    return result;
  }

 private:
  int fd_;
};

Status write_all(int fd, const void* data, std::size_t bytes, off_t offset,
                 const std::string& file_path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd, p, bytes, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return errno_error("writing " + file_path);
    p += n;
    bytes -= static_cast<std::size_t>(n);
    offset += n;
  }
  return Status::success();
}

// Copies the data extents of the image; its holes are the tensor regions, written next.
Status copy_image(int image, off_t size, int out, const std::string& out_path) {
  std::vector<char> buffer(std::size_t{1} << 20);
  off_t data = 0;
  while (data < size) {
    data = ::lseek(image, data, SEEK_DATA);
    if (data < 0 && errno == ENXIO) break;  // only a hole is left
    const off_t hole = data < 0 ? -1 : ::lseek(image, data, SEEK_HOLE);
    if (hole < 0) return errno_error("scanning the HDF5 layout");
    for (off_t at = data; at < hole;) {
      const auto chunk =
          static_cast<std::size_t>(std::min<off_t>(hole - at, static_cast<off_t>(buffer.size())));
      const ssize_t n = ::pread(image, buffer.data(), chunk, at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return errno_error("reading the HDF5 layout");
      SPW_TRY(write_all(out, buffer.data(), static_cast<std::size_t>(n), at, out_path));
      at += n;
    }
    data = hole;
  }
  return Status::success();
}

// The scratch file HDF5 lays the checkpoint out in: tmpfs (/dev/shm) where there is one, else
// the temporary directory. Deleted when done.
class StagingFile {
 public:
  StagingFile() = default;
  StagingFile(const StagingFile&) = delete;
  StagingFile& operator=(const StagingFile&) = delete;
  ~StagingFile() {
    if (fd_ < 0) return;
    ::close(fd_);
    ::unlink(path_.c_str());
  }

  Status create() {
    std::error_code ec;
    std::string fallback = std::filesystem::temp_directory_path(ec).string();
    if (ec || fallback.empty()) fallback = "/tmp";
    for (const std::string& dir : {std::string("/dev/shm"), fallback}) {
      path_ = dir + "/spillway-checkpoint-XXXXXX";
      fd_ = ::mkostemp(path_.data(), O_CLOEXEC);
      if (fd_ >= 0) return Status::success();
    }
    return errno_error("creating a scratch file in /dev/shm or " + fallback);
  }
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

 private:

  int fd_ = -1;
  std::string path_;
};

// Writes the image to `out_path`, sized to the whole file: the tensor regions stay holes.
Status write_skeleton(int image, const std::string& out_path) {
  struct stat image_stat {};
  if (::fstat(image, &image_stat) != 0) return errno_error("sizing the HDF5 layout");
  Fd out(::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666));
  if (!out.valid()) return errno_error("creating " + out_path);
  SPW_TRY(copy_image(image, image_stat.st_size, out.get(), out_path));
  if (::ftruncate(out.get(), image_stat.st_size) != 0) return errno_error("sizing " + out_path);
  if (::fsync(out.get()) != 0) return errno_error("flushing " + out_path);
  if (out.close() != 0) return errno_error("closing " + out_path);
  return Status::success();
}

// Makes the rename itself durable. Best effort: the checkpoint is complete either way, and
// some file systems refuse fsync on directories.
void sync_parent_directory(const std::string& file_path) {
  const std::filesystem::path parent = std::filesystem::path(file_path).parent_path();
  Fd fd(::open(parent.empty() ? "." : parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.valid()) (void)::fsync(fd.get());
}

std::vector<std::int64_t> dims_of(const Shape& shape) {
  std::vector<std::int64_t> dims;
  for (int i = 0; i < shape.rank(); ++i) dims.push_back(shape[i]);
  return dims;
}

CheckpointTensorSpec spec_of(const NamedParameter& p) {
  if (p.part) return {p.part->whole, p.part->whole_shape, p.part->rows};
  return {p.name, p.value != nullptr ? dims_of(p.value->shape()) : std::vector<std::int64_t>{},
          {}};
}

// Where `tensor`'s bytes go when its dataset starts at `offset`: all at once, or a part's
// row ranges each at its rows' place.
void add_regions(std::vector<CheckpointRegion>& regions, std::int64_t offset,
                 const Tensor* tensor, const std::optional<TensorPart>& part) {
  if (offset < 0 || tensor->numel() == 0) return;
  if (!part) {
    regions.push_back({offset, tensor, 0, static_cast<std::int64_t>(tensor->bytes())});
    return;
  }
  const std::int64_t row_bytes = static_cast<std::int64_t>(tensor->bytes()) / tensor->shape()[0];
  std::int64_t taken = 0;
  for (const RowRange& r : part->rows) {
    const std::int64_t bytes = (r.end - r.begin) * row_bytes;
    regions.push_back({offset + r.begin * row_bytes, tensor, taken, bytes});
    taken += bytes;
  }
}

}  // namespace

CheckpointOutline checkpoint_outline(const std::vector<NamedParameter>& params,
                                     const Optimizer* optimizer, const CheckpointMeta& meta) {
  CheckpointOutline outline;
  for (const NamedParameter& p : params) outline.parameters.push_back(spec_of(p));
  if (optimizer != nullptr) {
    outline.has_optimizer = true;
    outline.optimizer_settings = optimizer->settings();
    outline.optimizer_step = optimizer->step_count();
    outline.state_names = optimizer->state_names();
    for (const NamedParameter& p : optimizer->parameters()) {
      outline.optimizer_parameters.push_back(spec_of(p));
    }
  }
  outline.meta = meta;
  return outline;
}

Result<std::vector<CheckpointRegion>> checkpoint_regions(const std::vector<NamedParameter>& params,
                                                         const Optimizer* optimizer,
                                                         const std::vector<std::int64_t>& offsets) {
  std::vector<const Tensor*> tensors;
  std::vector<const std::optional<TensorPart>*> parts;
  for (const NamedParameter& p : params) {
    tensors.push_back(p.value);
    parts.push_back(&p.part);
  }
  if (optimizer != nullptr) {
    for (std::size_t i = 0; i < optimizer->parameters().size(); ++i) {
      for (std::size_t slot = 0; slot < optimizer->state_names().size(); ++slot) {
        // The outline gives state datasets their parameter's shape.
        if (optimizer->state(i, slot).shape() != optimizer->parameters()[i].value->shape()) {
          return error(StatusCode::internal, "optimizer state '" + optimizer->state_names()[slot] +
                                                 "' of '" + optimizer->parameters()[i].name +
                                                 "' is not shaped like its parameter");
        }
        tensors.push_back(&optimizer->state(i, slot));
        parts.push_back(&optimizer->parameters()[i].part);
      }
    }
  }
  if (tensors.size() != offsets.size()) {
    return error(StatusCode::internal, "the checkpoint layout has " +
                                           std::to_string(offsets.size()) + " datasets for " +
                                           std::to_string(tensors.size()) + " tensors");
  }
  std::vector<CheckpointRegion> regions;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    add_regions(regions, offsets[i], tensors[i], *parts[i]);
  }
  return regions;
}

namespace {

// The layout's scratch file reaches the checkpoint's whole size (its tensors are holes), so
// under a file-size limit (ulimit -f) its closing flush fails, which HDF5 1.10 answers with a
// crash at exit (see the top of this file). So a checkpoint that cannot fit the limit is
// refused before HDF5 sees it. The margin, 1 MiB and 4 KiB a dataset, is well above what
// the metadata takes (headers and links, a few hundred bytes a dataset).
Status check_file_size_limit(const CheckpointOutline& outline) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_FSIZE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) {
    return Status::success();
  }
  auto dataset_bytes = [](const std::vector<CheckpointTensorSpec>& specs, std::int64_t& count) {
    std::set<std::string> seen;  // the parts of a dataset share it
    std::int64_t bytes = 0;
    for (const CheckpointTensorSpec& s : specs) {
      if (!seen.insert(s.name).second) continue;
      bytes += elements_of(s.shape) * static_cast<std::int64_t>(sizeof(float));
      ++count;
    }
    return bytes;
  };
  std::int64_t datasets = 0;
  std::int64_t bytes = dataset_bytes(outline.parameters, datasets);
  std::int64_t optimizer_datasets = 0;
  const std::int64_t per_state = dataset_bytes(outline.optimizer_parameters, optimizer_datasets);
  const auto states = static_cast<std::int64_t>(outline.state_names.size());
  bytes += per_state * states;
  datasets += optimizer_datasets * states;
  const std::int64_t needed = bytes + (std::int64_t{1} << 20) + 4096 * datasets;
  if (static_cast<rlim_t>(needed) <= limit.rlim_cur) return Status::success();
  return error(StatusCode::io_error, "the checkpoint takes about " +
                                         format_bytes(static_cast<std::size_t>(needed)) +
                                         ", more than the largest file this process may write, " +
                                         format_bytes(static_cast<std::size_t>(limit.rlim_cur)) +
                                         " (ulimit -f): raise that limit");
}

}  // namespace

Result<std::vector<std::int64_t>> create_checkpoint_skeleton(const std::string& temporary,
                                                             const CheckpointOutline& outline) {
  SPW_TRY(check_specs(outline.parameters));
  SPW_TRY(check_specs(outline.optimizer_parameters));
  SPW_TRY(check_file_size_limit(outline));
  const QuietHdf5 quiet;
  StagingFile staging;
  SPW_TRY(staging.create());
  SPW_ASSIGN_OR_RETURN(std::vector<std::int64_t> offsets, lay_out(staging.path(), outline));
  const Status status = write_skeleton(staging.fd(), temporary);
  if (!status.ok()) {
    std::remove(temporary.c_str());
    return status;
  }
  return offsets;
}

Status write_checkpoint_tensors(const std::string& temporary,
                                const std::vector<CheckpointRegion>& regions) {
  Fd out(::open(temporary.c_str(), O_WRONLY | O_CLOEXEC));
  if (!out.valid()) return errno_error("opening " + temporary);
  for (const CheckpointRegion& region : regions) {
    SPW_TRY(write_all(out.get(),
                      reinterpret_cast<const char*>(region.tensor->data()) + region.tensor_offset,
                      static_cast<std::size_t>(region.bytes), static_cast<off_t>(region.offset),
                      temporary));
  }
  // Without fsync a crash after the rename could leave a complete-looking name over
  // missing data.
  if (::fsync(out.get()) != 0) return errno_error("flushing " + temporary);
  if (out.close() != 0) return errno_error("closing " + temporary);
  return Status::success();
}

Status publish_checkpoint(const std::string& temporary, const std::string& path) {
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    return errno_error("renaming " + temporary + " to " + path);
  }
  sync_parent_directory(path);
  return Status::success();
}

Status save_checkpoint(const std::string& path, const std::vector<NamedParameter>& params,
                       const Optimizer* optimizer, const CheckpointMeta& meta) {
  const std::string context = "writing checkpoint " + path;
  SPW_TRY(check_names(params).with_context(context));
  if (optimizer != nullptr) SPW_TRY(check_names(optimizer->parameters()).with_context(context));
  // The pid keeps two processes that share a file system from writing the same temporary.
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  auto offsets = create_checkpoint_skeleton(temporary, checkpoint_outline(params, optimizer, meta));
  if (!offsets.ok()) return offsets.status().with_context(context);
  auto regions = checkpoint_regions(params, optimizer, *offsets);
  Status status = regions.status();
  if (status.ok()) status = write_checkpoint_tensors(temporary, *regions);
  if (status.ok()) status = publish_checkpoint(temporary, path);
  if (!status.ok()) {
    std::remove(temporary.c_str());
    return status.with_context(context);
  }
  return Status::success();
}

}  // namespace spw
