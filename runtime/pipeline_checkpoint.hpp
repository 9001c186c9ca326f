// Checkpoints of pipeline runs: one file in the single-rank layout (runtime/checkpoint.hpp),
// so a pipeline run can resume from a single-rank checkpoint and the other way round, on any
// number of ranks and any stage split, since every tensor is found by its state_dict name.
//
// Saving never brings the model to one rank. World rank 0 gathers names and shapes only
// (with the rows of a bigger tensor each part holds, runtime/checkpoint.hpp),
// lays the whole file out and creates "<path>.tmp.<pid of rank 0>"; each rank of replica 0
// then writes its own parameters and optimizer state into that file where the layout put
// them, and rank 0 renames it into place once every rank has flushed. Replicas hold the same
// values, so the other replicas write nothing. The ranks of replica 0 must therefore see
// output.dir on a shared file system, as a batch job's ranks usually do.
#pragma once

#include <mpi.h>

#include <string>

#include "kernels/status.hpp"
#include "runtime/pipeline_executor.hpp"

namespace spw {

// Collective over `world`, the executor's communicator. Writes the parameters and optimizer
// state of replica 0, step = executor.steps_done() and `config_json`. The file appears whole
// or not at all; any rank's error leaves no file (nor a temporary) and is returned on every
// rank.
Status save_pipeline_checkpoint(PipelineExecutor& executor, MPI_Comm world,
                                const std::string& path, const std::string& config_json);

// Collective over `world`. Every rank reads its own stages' parameters and optimizer state
// by name and the executor continues from the checkpoint's step. A checkpoint without one
// of this model's tensors or with another shape for it is an error naming the dataset,
// returned on every rank before any rank changes anything.
Status load_pipeline_checkpoint(PipelineExecutor& executor, MPI_Comm world,
                                const std::string& path);

}  // namespace spw
