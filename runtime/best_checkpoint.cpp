#include "runtime/best_checkpoint.hpp"

#include <filesystem>
#include <fstream>

#include "runtime/json_file.hpp"

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

}  // namespace spw
