#include "blas_kernels.hpp"

#include <cpuid.h>
#include <blis.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <sstream>

#include "kernels/fma_units.hpp"

namespace spw::blas {

namespace {

// Last family BLIS 0.x tells apart (Zen 3 and Zen 4); later ones fall to its generic kernels.
constexpr int kLastAmdFamilyBlis0Knows = 0x19;

bool has(const KernelNames& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// What each of the named kernels needs of the CPU; a choice the CPU cannot run would die on
// its first instruction.
bool cpu_runs(const CpuFacts& cpu, std::string_view kernels) {
  if (kernels == "skx") return cpu.avx512;
  if (kernels == "haswell" || kernels.substr(0, 3) == "zen") return cpu.avx2_fma;
  return true;
}

std::string choices_listed(const KernelNames& names) {
  std::string out;
  for (const std::string& name : names) {
    out += (out.empty() ? "" : ", ") + name + " = " + std::to_string(blis_arch_id(name));
  }
  return out;
}

struct Decision {
  std::string requested;  // the kernels spillway asked for through BLIS_ARCH_TYPE; "" if none
  std::string chosen_by;
  std::string error;      // the user's BLIS_ARCH_TYPE is unusable
};

Decision decide(const CpuFacts& cpu) {
  const std::string version = bli_info_get_version_str();
  const KernelNames available = built_kernels();
  Decision d;
  if (const char* user = std::getenv("BLIS_ARCH_TYPE"); user != nullptr) {
    const Status usable = check_user_kernels(user, cpu, available, version);
    // BLIS reads the same variable whenever it starts, so there is no request to check.
    if (!usable.ok()) {
      d.error = usable.message();
    } else {
      d.chosen_by = std::string("BLIS_ARCH_TYPE=") + user + ", set before spillway started";
    }
    return d;
  }
  if (auto name = kernels_for(cpu, version, available)) {
    const int id = blis_arch_id(*name);
    setenv("BLIS_ARCH_TYPE", std::to_string(id).c_str(), 0);
    d.requested = *name;
    std::ostringstream why;
    why << "spillway: BLIS " << version;
    if (cpu.amd) {
      why << " does not know AMD family 0x" << std::hex << cpu.family
          << " and would run its generic kernels";
    } else {
      why << " gives an Intel core its AVX-512 kernels only when the model name tells of two "
             "512-bit FMA units; this core has two, measured";
    }
    d.chosen_by = why.str();
  }
  return d;
}

}  // namespace

KernelNames built_kernels() {
  // The x86 sub-configurations spillway may ask for, where blis.h says they were built.
  static constexpr std::string_view kBuilt[] = {
#ifdef BLIS_CONFIG_SKX
      "skx",
#endif
#ifdef BLIS_CONFIG_HASWELL
      "haswell",
#endif
#ifdef BLIS_CONFIG_ZEN3
      "zen3",
#endif
#ifdef BLIS_CONFIG_ZEN2
      "zen2",
#endif
#ifdef BLIS_CONFIG_ZEN
      "zen",
#endif
      "generic",  // every build has it
  };
  KernelNames names;
  for (int id = 0; id < BLIS_NUM_ARCHS; ++id) {  // in BLIS's order
    const std::string_view name = bli_arch_string(static_cast<arch_t>(id));  // a table look-up
    if (std::find(std::begin(kBuilt), std::end(kBuilt), name) != std::end(kBuilt)) {
      names.emplace_back(name);
    }
  }
  return names;
}

int blis_arch_id(std::string_view name) {
  for (int id = 0; id < BLIS_NUM_ARCHS; ++id) {
    if (name == bli_arch_string(static_cast<arch_t>(id))) return id;
  }
  return -1;
}

Status check_user_kernels(std::string_view value, const CpuFacts& cpu,
                          const KernelNames& available, std::string_view blis_version) {
  // Later BLIS releases read names too, and check what they are given themselves.
  if (blis_version.substr(0, 2) != "0.") return Status::success();
  const std::string text(value);
  char* end = nullptr;
  errno = 0;
  const long id = std::strtol(text.c_str(), &end, 10);
  const bool number = !text.empty() && *end == '\0' && errno == 0;
  const std::string name =
      number && id >= 0 && id < BLIS_NUM_ARCHS ? bli_arch_string(static_cast<arch_t>(id)) : "";
  if (name.empty() || !has(available, name)) {
    return error(StatusCode::config_error,
                 "BLIS_ARCH_TYPE=" + text + " names none of the kernels BLIS " +
                     std::string(blis_version) + " has here (" + choices_listed(available) +
                     "): set one of those numbers or unset it");
  }
  if (!cpu_runs(cpu, name)) {
    return error(StatusCode::config_error,
                 "BLIS_ARCH_TYPE=" + text + " asks for BLIS's " + name +
                     " kernels, which this CPU cannot run: unset it or choose from " +
                     choices_listed(available));
  }
  return Status::success();
}

namespace {

CpuFacts cpu_from_cpuid() {
  CpuFacts cpu;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return cpu;
  char vendor[13] = {};
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  cpu.amd = std::strcmp(vendor, "AuthenticAMD") == 0;
  cpu.intel = std::strcmp(vendor, "GenuineIntel") == 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0) {
    const unsigned base = (eax >> 8) & 0xf;
    cpu.family = static_cast<int>(base == 0xf ? base + ((eax >> 20) & 0xff) : base);
  }
  // __builtin_cpu_supports also asks whether the OS saves the wider registers.
  __builtin_cpu_init();
  cpu.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  cpu.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return cpu;
}

}  // namespace

CpuFacts this_cpu() {
  static const CpuFacts facts = [] {
    CpuFacts cpu = cpu_from_cpuid();
    if (cpu.intel && cpu.avx512) cpu.fma512_units = measure_fma512_units();
    return cpu;
  }();
  return facts;
}

std::optional<std::string> kernels_for(const CpuFacts& cpu, std::string_view blis_version,
                                       const KernelNames& available) {
  // BLIS 0.x knows Intel processors by their instruction sets, but gives AVX-512 ones its
  // skx kernels only when their model name says two FMA units; AMD ones by family. Later BLIS
  // releases are left to choose for themselves.
  if (blis_version.substr(0, 2) != "0.") return std::nullopt;
  if (cpu.intel) {
    // One unit: haswell, which BLIS takes itself, is as fast.
    if (cpu.fma512_units == 2 && cpu_runs(cpu, "skx") && has(available, "skx")) return "skx";
    return std::nullopt;
  }
  if (!cpu.amd || cpu.family <= kLastAmdFamilyBlis0Knows) return std::nullopt;
  for (const char* name : {"skx", "zen3", "haswell"}) {
    if (cpu_runs(cpu, name) && has(available, name)) return std::string(name);
  }
  return std::nullopt;
}

const Result<KernelChoice>& choose_kernels() {
  static const Result<KernelChoice> choice = []() -> Result<KernelChoice> {
    const CpuFacts cpu = this_cpu();
    const Decision d = decide(cpu);
    if (!d.error.empty()) return error(StatusCode::config_error, d.error);
    bli_init();
    KernelChoice c;
    c.arch_type = static_cast<int>(bli_arch_query_id());
    c.kernels = bli_arch_string(static_cast<arch_t>(c.arch_type));
    c.chosen_by = d.chosen_by.empty() ? "BLIS" : d.chosen_by;
    if (!d.requested.empty() && c.kernels != d.requested) {
      c.chosen_by = "BLIS, which had started before spillway could ask for " + d.requested;
    }
    if (c.kernels == "generic" && cpu.avx2_fma) {
      KernelNames runnable;
      for (const std::string& name : built_kernels()) {
        if (name != "generic" && cpu_runs(cpu, name)) runnable.push_back(name);
      }
      c.warning = "BLIS runs its generic kernels, several times slower than this CPU's vector "
                  "units allow: set BLIS_ARCH_TYPE to kernels it runs (" +
                  choices_listed(runnable) + ") before the job starts";
    }
    return c;
  }();
  return choice;
}

}  // namespace spw::blas
