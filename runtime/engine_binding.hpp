// Where this rank's offload engine thread goes: offload.engine_pu read against the rank's
// threads (kernels/threading.hpp) and the node's topology, with the "auto" choice made by
// offload/engine_placement.hpp. The executor binds the engine there when it creates it.
#pragma once

#include <string>
#include <vector>

#include "kernels/status.hpp"
#include "kernels/threading.hpp"

namespace spw {

struct EngineBinding {
  int pu = -1;                      // the PU to bind the engine thread to; -1: leave it unbound
  std::string why = "left unbound";  // how that was decided, for report.json
  std::vector<int> compute_pus;     // where the compute threads run (ThreadSetup::compute_pus)
};

// `engine_pu` is OffloadConfig::engine_pu. invalid_argument naming offload.engine_pu when
// it is a PU this node does not have.
Result<EngineBinding> engine_binding_for(int engine_pu, const ThreadSetup& threads);

// Whether an engine thread that may run on `engine_cpus` can land on a core a compute
// thread runs on (false when either is unknown).
bool engine_shares_core(const std::vector<int>& engine_cpus,
                        const std::vector<int>& compute_pus);

}  // namespace spw
