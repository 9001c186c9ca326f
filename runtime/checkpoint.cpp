#include "runtime/checkpoint.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <unordered_set>
#include <utility>

#include "runtime/version.hpp"

namespace spw {
namespace {

constexpr const char* kOptimizerGroup = "optimizer";
constexpr const char* kMetaGroup = "meta";
constexpr const char* kFormat = "spillway-checkpoint";
constexpr std::int64_t kFormatVersion = 1;

// Owns one HDF5 identifier, so every early return closes what it opened.
class Hid {
 public:
  using Closer = herr_t (*)(hid_t);

  Hid() = default;
  Hid(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  Hid(Hid&& other) noexcept
      : id_(std::exchange(other.id_, H5I_INVALID_HID)), closer_(other.closer_) {}
  Hid& operator=(Hid&& other) noexcept {
    if (this != &other) {
      close();
      id_ = std::exchange(other.id_, H5I_INVALID_HID);
      closer_ = other.closer_;
    }
    return *this;
  }
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  ~Hid() { close(); }

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closing a file flushes it, which can fail: the writer calls this and checks.
  herr_t close() {
    const herr_t result = id_ >= 0 ? closer_(id_) : 0;
    id_ = H5I_INVALID_HID;
    return result;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

// HDF5 prints its error stack to stderr by default; spillway reports through Status instead.
// The caller's handler comes back afterwards, for programs that use HDF5 themselves.
class QuietHdf5 {
 public:
  QuietHdf5() {
    H5Eget_auto2(H5E_DEFAULT, &handler_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~QuietHdf5() { H5Eset_auto2(H5E_DEFAULT, handler_, data_); }
  QuietHdf5(const QuietHdf5&) = delete;
  QuietHdf5& operator=(const QuietHdf5&) = delete;

 private:
  H5E_auto2_t handler_ = nullptr;
  void* data_ = nullptr;
};

herr_t keep_innermost(unsigned n, const H5E_error2_t* entry, void* reason) {
  if (n == 0 && entry->desc != nullptr) *static_cast<std::string*>(reason) = entry->desc;
  return 0;
}

// Why HDF5 failed, from the innermost entry of its error stack (the API-level ones only say
// "unable to open file"), then clears the stack. Entries from system calls embed strerror as
// "error message = '...'" among file names and timestamps; that part is what a user needs.
std::string hdf5_reason() {
  std::string reason;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, keep_innermost, &reason);
  H5Eclear2(H5E_DEFAULT);
  const std::string marker = "error message = '";
  const std::size_t at = reason.find(marker);
  if (at != std::string::npos) {
    const std::size_t begin = at + marker.size();
    return reason.substr(begin, reason.find('\'', begin) - begin);
  }
  return reason.substr(0, reason.find('\n'));
}

Status hdf5_error(const std::string& what) {
  const std::string reason = hdf5_reason();
  return error(StatusCode::io_error, reason.empty() ? what : what + " (" + reason + ")");
}

Status errno_error(const std::string& what) {
  return error(StatusCode::io_error, what + ": " + std::strerror(errno));
}

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

// Specs of one name are one dataset: either a single whole tensor, or parts of one shape
// whose rows fill the dataset exactly once.
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

// ---- writing ------------------------------------------------------------------------------
//
// HDF5 1.10 frees a file whose closing flush failed yet keeps its identifier, and the next
// close of it, at process exit at the latest, crashes (HDFGroup/hdf5#2257, fixed in 1.14.1).
// A full disk or quota makes exactly that flush fail. So HDF5 does not write the checkpoint:
// it lays the file out in a scratch file in local memory (metadata only: datasets get their
// space allocated early and are never filled, so their regions stay holes that cost nothing),
// and spillway writes the bytes, metadata image and tensors, with POSIX calls whose every
// error it handles.

// The file stores tensor bytes as they are in memory.
static_assert(std::endian::native == std::endian::little,
              "checkpoint datasets are little-endian float32");

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
  std::int64_t numel = 1;
  for (const std::int64_t d : shape) numel *= d;
  std::int64_t offset = -1;
  if (numel > 0) {
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
  std::string dir = std::filesystem::path(file_path).parent_path().string();
  if (dir.empty()) dir = ".";
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.valid()) (void)::fsync(fd.get());
}

// ---- reading ------------------------------------------------------------------------------

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

// The dataset a parameter is stored in: its own, or the whole tensor it is a part of.
const std::string& dataset_name(const NamedParameter& p) {
  return p.part ? p.part->whole : p.name;
}

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

Result<std::vector<std::int64_t>> create_checkpoint_skeleton(const std::string& temporary,
                                                             const CheckpointOutline& outline) {
  SPW_TRY(check_specs(outline.parameters));
  SPW_TRY(check_specs(outline.optimizer_parameters));
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
