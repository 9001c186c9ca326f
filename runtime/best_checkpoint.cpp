#include "runtime/best_checkpoint.hpp"

#include <filesystem>
#include <fstream>

#include "runtime/json_file.hpp"
#include "runtime/mpi_support.hpp"

namespace spw {

namespace {

std::string record_path(const std::string& output_dir) { return output_dir + "/best.json"; }

}  // namespace

std::string best_checkpoint_path(const std::string& output_dir) { return output_dir + "/best.h5"; }

Result<BestCheckpoint> read_best_record(const std::string& output_dir, std::int64_t resumed_step) {
  const std::string path = record_path(output_dir);
  BestCheckpoint best;
  std::error_code ec;
  if (resumed_step < 0 || !std::filesystem::exists(path, ec)) return best;
  std::ifstream in(path);
  nlohmann::json record;
  try {
    in >> record;
    const std::int64_t step = record.at("step").get<std::int64_t>();
    const double loss = record.at("loss").get<double>();
    if (step > resumed_step) return best;
    best.step = step;
    best.loss = loss;
  } catch (const std::exception& e) {
    return error(StatusCode::io_error, "cannot read " + path + " (" + e.what() +
                                           "): remove it, or resume into another output.dir");
  }
  return best;
}

Status write_best_record(const std::string& output_dir, const BestCheckpoint& best) {
  return write_json_atomically(record_path(output_dir), to_json(best, output_dir));
}

nlohmann::json to_json(const BestCheckpoint& best, const std::string& output_dir) {
  return {
      {"step", best.step}, {"loss", best.loss}, {"checkpoint", best_checkpoint_path(output_dir)}};
}

Result<BestCheckpoint> agree_on_best_record(MPI_Comm comm, const std::string& output_dir,
                                            std::int64_t resumed_step) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  Result<BestCheckpoint> read =
      rank == 0 ? read_best_record(output_dir, resumed_step) : BestCheckpoint{};
  SPW_TRY(agree_on_status(comm, read.status()));
  BestCheckpoint best = *read;
  SPW_TRY(mpi_check(MPI_Bcast(&best.step, 1, MPI_INT64_T, 0, comm), "sharing the best step"));
  SPW_TRY(mpi_check(MPI_Bcast(&best.loss, 1, MPI_DOUBLE, 0, comm), "sharing the best loss"));
  return best;
}

Status keep_if_best(MPI_Comm comm, const std::string& output_dir, std::int64_t step, double loss,
                    BestCheckpoint& best, const std::function<Status(const std::string&)>& save,
                    std::FILE* log) {
  if (!best.improved_by(loss)) return Status::success();
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  const std::string path = best_checkpoint_path(output_dir);
  SPW_TRY(save(path));
  const BestCheckpoint record{step, loss};
  SPW_TRY(
      agree_on_status(comm, rank == 0 ? write_best_record(output_dir, record) : Status::success()));
  best = record;
  if (log != nullptr) {
    std::fprintf(log, "step %lld: the lowest eval loss so far; saved %s\n",
                 static_cast<long long>(step), path.c_str());
    std::fflush(log);
  }
  return Status::success();
}

}  // namespace spw
