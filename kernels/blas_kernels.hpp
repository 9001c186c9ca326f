// Which BLIS kernels the process runs, chosen before BLIS starts.
//
// BLIS picks its kernels (a "sub-configuration") from the CPU once, at its first call, and
// keeps them. The BLIS of Debian 12 (0.9) tells AMD processors apart by family and knows
// none after Zen 3/4 (family 0x19): on a Zen 5 (0x1a) it runs its generic C kernels, whose
// sgemm ran at 21 GFLOP/s on one core where its AVX-512 kernels ("skx") ran at 118, and a
// gpt-s step 4.7x slower (2026-11-27). It takes its AVX-512 kernels on Intel only where the
// model name tells it the core has two 512-bit FMA units (fma_units.hpp), so on a VM whose
// CPU is called "Intel(R) Xeon(R) Processor" it runs its AVX2 ("haswell") kernels at half
// the speed. So before BLIS starts, spillway asks for the kernels the CPU runs best, through
// BLIS's own BLIS_ARCH_TYPE, unless the user set that variable, or BLIS would recognise the
// CPU anyway.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/status.hpp"

namespace spw::blas {

struct CpuFacts {
  bool amd = false;
  bool intel = false;
  int family = 0;         // the display family: base family plus extended family
  bool avx2_fma = false;  // what BLIS's haswell and zen kernels use
  bool avx512 = false;    // F, DQ, BW and VL together: what its skx kernels use
  int fma512_units = 0;   // measured on Intel with AVX-512 (fma_units.hpp); 0 elsewhere
};

// Measured once per process (about a millisecond on Intel with AVX-512); later calls return
// the first answer.
CpuFacts this_cpu();

// Sub-configurations by BLIS's names ("skx", "zen3", ...).
using KernelNames = std::vector<std::string>;

// The sub-configuration to ask BLIS `blis_version` for on `cpu`, when that BLIS would not
// recognise it and has kernels for its instruction set among `available` (the names this
// BLIS was built with); nullopt when BLIS's own choice stands.
std::optional<std::string> kernels_for(const CpuFacts& cpu, std::string_view blis_version,
                                       const KernelNames& available);

// config_error naming the fix when `value`, the user's BLIS_ARCH_TYPE, names none of the
// sub-configurations in `available` (BLIS 0.x reads a word as 0 and stops the process on a
// number past its table) or one that `cpu` cannot run (it would crash on its first vector
// instruction).
Status check_user_kernels(std::string_view value, const CpuFacts& cpu,
                          const KernelNames& available, std::string_view blis_version);

// The sub-configurations this BLIS was built with, in BLIS's order.
KernelNames built_kernels();

// BLIS's number for the sub-configuration `name` (what BLIS_ARCH_TYPE takes); -1 if none.
int blis_arch_id(std::string_view name);

struct KernelChoice {
  std::string kernels;    // the sub-configuration BLIS runs: "skx", "zen3", "generic", ...
  int arch_type = -1;     // its number, for BLIS_ARCH_TYPE in other programs of the job
  std::string chosen_by;  // who chose it, and why, in a few words
  // Non-empty when BLIS runs kernels well below what the CPU can do: how to fix it.
  std::string warning;
};

// Chooses and starts BLIS on the first call; every call returns that first answer. Call
// before any other BLIS call: blas::sgemm and setup_threads do. Setting BLIS_ARCH_TYPE
// changes the process environment, so the first call belongs at start-up, before threads
// that read the environment run. config_error, with BLIS not started, when the user's
// BLIS_ARCH_TYPE names kernels this BLIS lacks or this CPU cannot run (BLIS would stop
// the process or crash on it).
const Result<KernelChoice>& choose_kernels();

}  // namespace spw::blas
