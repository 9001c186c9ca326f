// output.keep_best: the checkpoint with the lowest held-out loss so far, kept beside the
// scheduled ones as output.dir/best.h5, with output.dir/best.json ({"step", "loss",
// "checkpoint"}) saying which it is. A resumed run goes on from the record of the run it
// resumes; a fresh run starts its own. Written after the checkpoint, so best.json never
// names a file that is not there whole.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "kernels/status.hpp"

namespace spw {

struct BestCheckpoint {
  std::int64_t step = -1;  // -1: none yet
  double loss = std::numeric_limits<double>::infinity();
  bool improved_by(double candidate) const { return candidate < loss; }
};

std::string best_checkpoint_path(const std::string& output_dir);  // output_dir/best.h5

// The record a run resumed from step `resumed_step` goes on from: output_dir/best.json when
// it names a step at or before `resumed_step` (a later one belongs to a run this one is not
// the continuation of), else none. A fresh run passes resumed_step -1 and starts with none.
// io_error for a best.json that exists but cannot be read or parsed.
Result<BestCheckpoint> read_best_record(const std::string& output_dir, std::int64_t resumed_step);

// Writes output_dir/best.json atomically.
Status write_best_record(const std::string& output_dir, const BestCheckpoint& best);

nlohmann::json to_json(const BestCheckpoint& best, const std::string& output_dir);

}  // namespace spw
