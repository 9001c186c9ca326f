#include "runtime/mpi_support.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace spw {

Status mpi_check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return Status::success();
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(rc, text, &length);
  return error(StatusCode::communication, std::string(what) + ": " + std::string(text, length));
}

Status agree_on_status(MPI_Comm comm, const Status& local) {
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const int mine[2] = {local.ok() ? size : rank, local.ok() ? 0 : 1};
  int lowest_failed = size;
  int failures = 0;
  SPW_TRY(mpi_check(MPI_Allreduce(&mine[0], &lowest_failed, 1, MPI_INT, MPI_MIN, comm),
                    "agreeing on the outcome of setup"));
  SPW_TRY(mpi_check(MPI_Allreduce(&mine[1], &failures, 1, MPI_INT, MPI_SUM, comm),
                    "agreeing on the outcome of setup"));
  if (failures == 0) return Status::success();

  int header[2] = {static_cast<int>(local.code()), static_cast<int>(local.message().size())};
  SPW_TRY(mpi_check(MPI_Bcast(header, 2, MPI_INT, lowest_failed, comm), "sharing an error"));
  std::vector<char> text(local.message().begin(), local.message().end());
  text.resize(static_cast<std::size_t>(header[1]));
  SPW_TRY(mpi_check(MPI_Bcast(text.data(), header[1], MPI_CHAR, lowest_failed, comm),
                    "sharing an error"));
  std::string message(text.begin(), text.end());
  if (failures < size) message = "rank " + std::to_string(lowest_failed) + ": " + message;
  return error(static_cast<StatusCode>(header[0]), message);
}

Result<double> ping_pong_seconds(MPI_Comm comm, int peer, bool starts, std::int64_t bytes,
                                 int reps) {
  if (bytes < 0 || bytes > (std::int64_t{1} << 30)) {
    return error(StatusCode::invalid_argument,
                 "a ping-pong of " + std::to_string(bytes) + " bytes is out of range");
  }
  std::vector<char> buffer(static_cast<std::size_t>(bytes));
  const int count = static_cast<int>(bytes);
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const double start = MPI_Wtime();
    for (int leg = 0; leg < 2; ++leg) {
      if ((leg == 0) == starts) {
        SPW_TRY(mpi_check(MPI_Send(buffer.data(), count, MPI_CHAR, peer, 0, comm), "ping-pong"));
      } else {
        SPW_TRY(mpi_check(
            MPI_Recv(buffer.data(), count, MPI_CHAR, peer, 0, comm, MPI_STATUS_IGNORE),
            "ping-pong"));
      }
    }
    best = std::min(best, (MPI_Wtime() - start) / 2);
  }
  return best;
}

Status broadcast_string(MPI_Comm comm, std::string& text, const char* what) {
  int length = static_cast<int>(text.size());
  SPW_TRY(mpi_check(MPI_Bcast(&length, 1, MPI_INT, 0, comm), what));
  text.resize(static_cast<std::size_t>(length));
  if (length == 0) return Status::success();
  return mpi_check(MPI_Bcast(text.data(), length, MPI_CHAR, 0, comm), what);
}

Result<std::vector<std::string>> gather_strings(MPI_Comm comm, const std::string& mine) {
  int rank = 0, size = 0;
  SPW_TRY(mpi_check(MPI_Comm_rank(comm, &rank), "gathering text from every rank"));
  SPW_TRY(mpi_check(MPI_Comm_size(comm, &size), "gathering text from every rank"));
  const int length = static_cast<int>(mine.size());
  std::vector<int> lengths(rank == 0 ? static_cast<std::size_t>(size) : 0);
  SPW_TRY(mpi_check(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, comm),
                    "gathering text from every rank"));
  std::vector<int> offsets(lengths.size(), 0);
  for (std::size_t i = 1; i < lengths.size(); ++i) offsets[i] = offsets[i - 1] + lengths[i - 1];
  std::string all(rank == 0 ? static_cast<std::size_t>(offsets.back() + lengths.back()) : 0, '\0');
  SPW_TRY(mpi_check(MPI_Gatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(),
                                offsets.data(), MPI_CHAR, 0, comm),
                    "gathering text from every rank"));
  std::vector<std::string> out;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    out.push_back(all.substr(static_cast<std::size_t>(offsets[i]),
                             static_cast<std::size_t>(lengths[i])));
  }
  return out;
}

Result<NodeShare> node_share(MPI_Comm comm) {
  MPI_Comm node = MPI_COMM_NULL;
  SPW_TRY(mpi_check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
                    "finding the ranks on this node"));
  NodeShare share;
  MPI_Comm_rank(node, &share.local_rank);
  MPI_Comm_size(node, &share.local_ranks);
  MPI_Comm_free(&node);
  return share;
}

}  // namespace spw
