// bench_ceilings: the physical limits the memory-pressure benchmark compares its transfer rates
// with, measured on the same machine in the same run. Run under mpiexec with 2 ranks (on one
// node, with OMPI_MCA_osc=sm for the RMA figures, as the peer tier is run):
//   memcpy        one thread copying `bytes` (rank 0; rank 1 waits)
//   mpi_p2p       one-way bandwidth between ranks 0 and 1: half a ping-pong of `bytes`
//   mpi_get/put   rank 0 reads/writes `bytes` of rank 1's window under a shared passive-target
//                 lock, as the peer tier loads and stores a stash
//   mpi_put_first the same MPI_Put into a window nobody has touched yet (a new one each
//                 repetition): what page faults cost a first store, which the peer tier now
//                 pays at creation
//   file          sequential pwrite then pread of `file_bytes` in `block`-sized pieces from a
//                 page-aligned buffer, O_DIRECT where the file system takes it, into an unnamed
//                 file in `dir`: the device's sequential rate, as the file tier uses it; one
//                 stream (rank 0) and both ranks at once
// Each figure is the median over `reps` repetitions (and the best one beside it), in GB/s
// (1e9 bytes/s). Rank 0 writes the JSON to --out.
//   bench_ceilings --out FILE --dir DIR [--bytes N] [--file-bytes N] [--block N] [--reps N]
#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

constexpr std::size_t kPage = 4096;

struct Options {
  std::string out, dir;
  std::size_t bytes = std::size_t{64} << 20;
  std::size_t file_bytes = std::size_t{256} << 20;
  std::size_t block = std::size_t{4} << 20;
  int reps = 5;
};

// A failure on any rank ends the tool with one line from that rank; MPI_Abort because the
// other rank may be blocked in a collective.
[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "bench_ceilings: %s\n", message.c_str());
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<unsigned char, AlignedFree>;

// Page-aligned and touched, so no repetition pays for first-touch page faults.
Buffer make_buffer(std::size_t bytes, unsigned char fill) {
  const std::size_t rounded = (bytes + kPage - 1) / kPage * kPage;
  auto* p = static_cast<unsigned char*>(std::aligned_alloc(kPage, rounded));
  if (p == nullptr) fail("cannot allocate " + std::to_string(bytes) + " bytes");
  std::memset(p, fill, rounded);
  return Buffer(p);
}

struct Figure {
  std::vector<double> seconds;
  std::size_t bytes = 0;
  nlohmann::json json() const {
    std::vector<double> s = seconds;
    std::sort(s.begin(), s.end());
    const std::size_t n = s.size();
    const double median = n % 2 == 1 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    const double b = static_cast<double>(bytes);
    return {{"bytes", bytes},
            {"repetitions", n},
            {"gb_per_s", b / median / 1e9},
            {"best_gb_per_s", b / s.front() / 1e9}};
  }
};

Figure measure_memcpy(const Options& o, int rank) {
  Figure f;
  f.bytes = o.bytes;
  if (rank == 0) {
    Buffer src = make_buffer(o.bytes, 1), dst = make_buffer(o.bytes, 2);
    std::memcpy(dst.get(), src.get(), o.bytes);  // warm-up
    for (int i = 0; i < o.reps; ++i) {
      const double t = now();
      std::memcpy(dst.get(), src.get(), o.bytes);
      f.seconds.push_back(now() - t);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return f;
}

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(rc, text, &length);
  fail(std::string(what) + ": " + std::string(text, static_cast<std::size_t>(length)));
}

// Large messages go in pieces below INT_MAX, as the peer tier does.
int count_of(std::size_t bytes) {
  if (bytes > (std::size_t{1} << 30)) fail("--bytes must be at most 1 GiB for the MPI figures");
  return static_cast<int>(bytes);
}

Figure measure_p2p(const Options& o, int rank) {
  Figure f;
  f.bytes = o.bytes;
  Buffer buffer = make_buffer(o.bytes, 3);
  const int n = count_of(o.bytes);
  const int peer = 1 - rank;
  for (int i = -1; i < o.reps; ++i) {  // i = -1: warm-up
    MPI_Barrier(MPI_COMM_WORLD);
    const double t = now();
    for (int leg = 0; leg < 2; ++leg) {
      if ((leg == 0) == (rank == 0)) {
        check(MPI_Send(buffer.get(), n, MPI_BYTE, peer, 0, MPI_COMM_WORLD), "MPI_Send");
      } else {
        check(MPI_Recv(buffer.get(), n, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
              "MPI_Recv");
      }
    }
    if (i >= 0) f.seconds.push_back((now() - t) / 2);
  }
  return f;
}

// Rank 0 writes all of a window rank 1 has just lent, untouched, in one lock epoch; a new
// window each repetition.
Figure measure_first_put(const Options& o, int rank) {
  Figure f;
  f.bytes = o.bytes;
  const int n = count_of(o.bytes);
  Buffer local = make_buffer(o.bytes, 7);
  for (int i = 0; i < o.reps; ++i) {
    void* base = nullptr;
    MPI_Win window = MPI_WIN_NULL;
    check(MPI_Win_allocate(rank == 1 ? static_cast<MPI_Aint>(o.bytes) : 0, 1, MPI_INFO_NULL,
                           MPI_COMM_WORLD, &base, &window),
          "MPI_Win_allocate");
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      const double t = now();
      check(MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, window), "MPI_Win_lock");
      check(MPI_Put(local.get(), n, MPI_BYTE, 1, 0, n, MPI_BYTE, window), "MPI_Put");
      check(MPI_Win_unlock(1, window), "MPI_Win_unlock");
      f.seconds.push_back(now() - t);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_free(&window);
  }
  return f;
}

// Rank 1 lends a window, rank 0 reads or writes all of it in one lock epoch, as the peer tier's
// engine thread does for one stash.
Figure measure_rma(const Options& o, int rank, bool put) {
  Figure f;
  f.bytes = o.bytes;
  const int n = count_of(o.bytes);
  void* base = nullptr;
  MPI_Win window = MPI_WIN_NULL;
  check(MPI_Win_allocate(rank == 1 ? static_cast<MPI_Aint>(o.bytes) : 0, 1, MPI_INFO_NULL,
                         MPI_COMM_WORLD, &base, &window),
        "MPI_Win_allocate");
  if (rank == 1) std::memset(base, 4, o.bytes);
  Buffer local = make_buffer(o.bytes, 5);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    for (int i = -1; i < o.reps; ++i) {
      const double t = now();
      check(MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, window), "MPI_Win_lock");
      check(put ? MPI_Put(local.get(), n, MPI_BYTE, 1, 0, n, MPI_BYTE, window)
                : MPI_Get(local.get(), n, MPI_BYTE, 1, 0, n, MPI_BYTE, window),
            put ? "MPI_Put" : "MPI_Get");
      check(MPI_Win_unlock(1, window), "MPI_Win_unlock");
      if (i >= 0) f.seconds.push_back(now() - t);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Win_free(&window);
  return f;
}

int open_unnamed(const std::string& dir, bool direct) {
  const int flags = O_RDWR | O_CLOEXEC | (direct ? O_DIRECT : 0);
  int fd = ::open(dir.c_str(), flags | O_TMPFILE, 0600);
  if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != ENOENT)) return fd;
  std::string pattern = dir + "/spillway-ceiling-XXXXXX";
  fd = ::mkostemp(pattern.data(), O_CLOEXEC | (direct ? O_DIRECT : 0));
  if (fd >= 0) ::unlink(pattern.c_str());
  return fd;
}

// Writes then reads `bytes` in `block` pieces; adds each direction's seconds.
void file_pass(const Options& o, int fd, unsigned char* buffer, double& write_s, double& read_s) {
  double t = now();
  for (std::size_t offset = 0; offset < o.file_bytes;) {
    const ssize_t n = ::pwrite(fd, buffer, o.block, static_cast<off_t>(offset));
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      fail("writing " + o.dir + " at byte " + std::to_string(offset) + ": " +
           (n < 0 ? std::strerror(errno) : "no space") +
           " (free space there, or lower --file-bytes)");
    }
    offset += static_cast<std::size_t>(n);
  }
  write_s = now() - t;
  t = now();
  for (std::size_t offset = 0; offset < o.file_bytes;) {
    const ssize_t n = ::pread(fd, buffer, o.block, static_cast<off_t>(offset));
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      fail("reading " + o.dir + " at byte " + std::to_string(offset) + ": " +
           (n < 0 ? std::strerror(errno) : "file shorter than written"));
    }
    offset += static_cast<std::size_t>(n);
  }
  read_s = now() - t;
}

// `streams` ranks (0..streams-1) at once, the others wait. Per-stream figures: the write,
// the read, and both together (bytes written + read over the time of both), which is what the
// file tier's engine moves per second of its own time.
nlohmann::json measure_file(const Options& o, int rank, int streams, bool& direct) {
  Figure write, read, both;
  write.bytes = read.bytes = o.file_bytes;
  both.bytes = 2 * o.file_bytes;
  const bool mine = rank < streams;
  int fd = -1;
  if (mine) {
    fd = open_unnamed(o.dir, true);
    direct = true;
    if (fd >= 0) {  // tmpfs and some network file systems refuse O_DIRECT at the first write
      Buffer probe = make_buffer(kPage, 0);
      if (::pwrite(fd, probe.get(), kPage, 0) != static_cast<ssize_t>(kPage) && errno == EINVAL) {
        ::close(fd);
        fd = -1;
        errno = EINVAL;
      }
    }
    if (fd < 0 && errno == EINVAL) {
      direct = false;
      fd = open_unnamed(o.dir, false);
    }
    if (fd < 0)
      fail("cannot create a file in " + o.dir + " (" + std::strerror(errno) +
           "): pass --dir a writable directory");
  }
  Buffer buffer = make_buffer(o.block, 6);
  for (int i = -1; i < o.reps; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (!mine) continue;
    double w = 0, r = 0;
    file_pass(o, fd, buffer.get(), w, r);
    if (i < 0) continue;
    write.seconds.push_back(w);
    read.seconds.push_back(r);
    both.seconds.push_back(w + r);
  }
  if (fd >= 0) ::close(fd);
  MPI_Barrier(MPI_COMM_WORLD);
  if (!mine) return nullptr;
  return {{"streams", streams}, {"write", write.json()}, {"read", read.json()},
          {"write_read", both.json()}};
}

std::size_t parse_size(const std::string& flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v == 0)
    fail(flag + " wants a positive byte count, got '" + text + "'");
  return static_cast<std::size_t>(v);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) fail(flag + " needs a value (usage: bench_ceilings --out FILE --dir DIR "
                                   "[--bytes N] [--file-bytes N] [--block N] [--reps N])");
    const char* value = argv[++i];
    if (flag == "--out") o.out = value;
    else if (flag == "--dir") o.dir = value;
    else if (flag == "--bytes") o.bytes = parse_size(flag, value);
    else if (flag == "--file-bytes") o.file_bytes = parse_size(flag, value);
    else if (flag == "--block") o.block = parse_size(flag, value);
    else if (flag == "--reps")
      o.reps = static_cast<int>(std::min<std::size_t>(parse_size(flag, value), 1000));
    else fail("unknown option " + flag + " (usage: bench_ceilings --out FILE --dir DIR ...)");
  }
  if (o.out.empty() || o.dir.empty()) fail("--out FILE and --dir DIR are required");
  if (o.block % kPage != 0 || o.file_bytes % o.block != 0)
    fail("--block must be a multiple of 4096 and divide --file-bytes (O_DIRECT alignment)");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  const Options o = parse(argc, argv);
  if (size != 2) fail("run with 2 ranks (mpiexec -n 2), got " + std::to_string(size));

  const Figure memcpy_figure = measure_memcpy(o, rank);
  const Figure p2p = measure_p2p(o, rank);
  const Figure get = measure_rma(o, rank, false);
  const Figure put = measure_rma(o, rank, true);
  const Figure first_put = measure_first_put(o, rank);
  bool direct = false;
  const nlohmann::json one_stream = measure_file(o, rank, 1, direct);
  const nlohmann::json two_streams = measure_file(o, rank, 2, direct);

  if (rank == 0) {
    const char* osc = std::getenv("OMPI_MCA_osc");
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    const nlohmann::json out = {
        {"host", host},
        {"memcpy", memcpy_figure.json()},
        {"mpi_p2p", p2p.json()},
        {"mpi_get", get.json()},
        {"mpi_put", put.json()},
        {"mpi_put_first", first_put.json()},
        {"osc", osc != nullptr ? osc : ""},
        {"file",
         {{"dir", o.dir},
          {"o_direct", direct},
          {"block_bytes", o.block},
          {"one_stream", one_stream},
          {"two_streams_per_stream", two_streams}}}};
    const std::string tmp = o.out + ".tmp";
    std::ofstream file(tmp);
    file << out.dump(1) << "\n";
    file.close();
    if (!file || std::rename(tmp.c_str(), o.out.c_str()) != 0)
      fail("cannot write " + o.out + ": pass --out a path in a writable directory");
  }
  MPI_Finalize();
  return 0;
}
