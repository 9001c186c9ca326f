// output.keep_best: the checkpoint with the lowest held-out loss so far, kept beside the
// scheduled ones as output.dir/best.h5, with output.dir/best.json ({"step", "loss",
// "checkpoint"}) saying which it is. A resumed run goes on from the record of the run it
// resumes; a fresh run starts its own.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <functional>
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

// ---- for the training loops (collective over `comm`; MPI_COMM_SELF on one rank) --------

// read_best_record on rank 0, shared with every rank; every rank returns the same error.
Result<BestCheckpoint> agree_on_best_record(MPI_Comm comm, const std::string& output_dir,
                                            std::int64_t resumed_step);

// After an evaluation that measured `loss` (the same on every rank) after `step`: when it
// beats `best`, `save` writes best.h5 (collective, the same status on every rank), rank 0
// writes best.json, `best` becomes the new record, and `log` (rank 0's; may be null) says
// so. Every rank returns the same status. Both files are replaced whole or not at all; if
// best.json fails after best.h5 was saved, it still describes the record before.
Status keep_if_best(MPI_Comm comm, const std::string& output_dir, std::int64_t step, double loss,
                    BestCheckpoint& best, const std::function<Status(const std::string&)>& save,
                    std::FILE* log);

}  // namespace spw
