// Which BLIS kernels spillway asks for, on CPUs described rather than run.
#include <gtest/gtest.h>

#include <algorithm>

#include "kernels/blas_kernels.hpp"
#include "kernels/fma_units.hpp"

namespace spw::blas {
namespace {

const KernelNames kBuilt = {"skx", "haswell", "zen3", "zen2", "zen", "generic"};
constexpr std::string_view kBlis09 = "0.9.0";

constexpr CpuFacts kZen5{.amd = true, .family = 0x1a, .avx2_fma = true, .avx512 = true};
constexpr CpuFacts kNewAmdWithoutAvx512{.amd = true, .family = 0x1a, .avx2_fma = true,
                                        .avx512 = false};
constexpr CpuFacts kZen4{.amd = true, .family = 0x19, .avx2_fma = true, .avx512 = true};
constexpr CpuFacts kZen3{.amd = true, .family = 0x19, .avx2_fma = true, .avx512 = false};
constexpr CpuFacts kIntelWithTwoFmaUnits{.intel = true, .family = 6, .avx2_fma = true,
                                         .avx512 = true, .fma512_units = 2};
constexpr CpuFacts kIntelWithOneFmaUnit{.intel = true, .family = 6, .avx2_fma = true,
                                        .avx512 = true, .fma512_units = 1};
constexpr CpuFacts kIntelNotMeasured{.intel = true, .family = 6, .avx2_fma = true,
                                     .avx512 = true};
constexpr CpuFacts kIntelWithAvx2{.intel = true, .family = 6, .avx2_fma = true};
constexpr CpuFacts kNewAmdWithoutAvx2{.amd = true, .family = 0x1a, .avx2_fma = false,
                                      .avx512 = false};

TEST(KernelsFor, AZen5GetsTheAvx512KernelsBlis09WouldNotPick) {
  EXPECT_EQ(kernels_for(kZen5, kBlis09, kBuilt), "skx");
}

TEST(KernelsFor, WithoutAvx512ANewAmdGetsZen3ThenHaswell) {
  EXPECT_EQ(kernels_for(kNewAmdWithoutAvx512, kBlis09, kBuilt), "zen3");
  EXPECT_EQ(kernels_for(kNewAmdWithoutAvx512, kBlis09, {"haswell", "generic"}), "haswell");
  // skx is there, but the CPU could not run it.
  EXPECT_EQ(kernels_for(kNewAmdWithoutAvx512, kBlis09, {"skx", "generic"}), std::nullopt);
}

TEST(KernelsFor, CpusBlisRecognisesKeepItsChoice) {
  EXPECT_EQ(kernels_for(kZen4, kBlis09, kBuilt), std::nullopt);
  EXPECT_EQ(kernels_for(kZen3, kBlis09, kBuilt), std::nullopt);
  EXPECT_EQ(kernels_for(kIntelWithAvx2, kBlis09, kBuilt), std::nullopt);
}

TEST(KernelsFor, AnIntelCoreWithTwo512BitFmaUnitsGetsSkxWhateverItsName) {
  EXPECT_EQ(kernels_for(kIntelWithTwoFmaUnits, kBlis09, kBuilt), "skx");
  EXPECT_EQ(kernels_for(kIntelWithTwoFmaUnits, kBlis09, {"haswell", "generic"}), std::nullopt);
  EXPECT_EQ(kernels_for(kIntelWithTwoFmaUnits, "1.0", kBuilt), std::nullopt);
  // With one unit BLIS's haswell is as fast, and unmeasured means BLIS decides.
  EXPECT_EQ(kernels_for(kIntelWithOneFmaUnit, kBlis09, kBuilt), std::nullopt);
  EXPECT_EQ(kernels_for(kIntelNotMeasured, kBlis09, kBuilt), std::nullopt);
}

TEST(KernelsFor, LaterBlisReleasesChooseForThemselves) {
  EXPECT_EQ(kernels_for(kZen5, "1.0", kBuilt), std::nullopt);
  EXPECT_EQ(kernels_for(kZen5, "2.1.0", kBuilt), std::nullopt);
}

TEST(KernelsFor, NoVectorKernelsItCanRunMeansNoChoice) {
  EXPECT_EQ(kernels_for(kNewAmdWithoutAvx2, kBlis09, kBuilt), std::nullopt);
  EXPECT_EQ(kernels_for(kZen5, kBlis09, {"generic"}), std::nullopt);
}

TEST(ThisCpu, CountsFmaUnitsOnIntelWithAvx512Only) {
  const CpuFacts cpu = this_cpu();
  if (cpu.intel && cpu.avx512) {
    EXPECT_TRUE(cpu.fma512_units == 1 || cpu.fma512_units == 2) << cpu.fma512_units;
    // A second measurement agrees: the two rates lie about 2x apart on either kind of core.
    EXPECT_EQ(measure_fma512_units(), cpu.fma512_units);
  } else {
    EXPECT_EQ(cpu.fma512_units, 0);
  }
  __builtin_cpu_init();
  EXPECT_EQ(measure_fma512_units() == 0, !__builtin_cpu_supports("avx512f"));
}

std::string id_of(std::string_view name) { return std::to_string(blis_arch_id(name)); }

TEST(CheckUserKernels, TheLinkedBlisNumbersItsKernels) {
  // The numbers BLIS_ARCH_TYPE takes come from the linked BLIS, never from spillway.
  EXPECT_GE(blis_arch_id("skx"), 0);
  EXPECT_GE(blis_arch_id("generic"), 0);
  EXPECT_NE(blis_arch_id("skx"), blis_arch_id("generic"));
  EXPECT_EQ(blis_arch_id("fast"), -1);
  const KernelNames built = built_kernels();
  EXPECT_NE(std::find(built.begin(), built.end(), "generic"), built.end());
}

TEST(CheckUserKernels, KernelsTheCpuRunsAreAccepted) {
  EXPECT_TRUE(check_user_kernels(id_of("skx"), kZen5, kBuilt, kBlis09).ok());
  EXPECT_TRUE(check_user_kernels(id_of("haswell"), kZen5, kBuilt, kBlis09).ok());
  EXPECT_TRUE(check_user_kernels(id_of("generic"), kNewAmdWithoutAvx2, kBuilt, kBlis09).ok());
}

TEST(CheckUserKernels, AWordOrANumberOutsideTheTableIsRefusedWithTheChoices) {
  for (std::string value : {"fast", "skx", "", "99", "-1", "3x"}) {
    const Status s = check_user_kernels(value, kZen5, kBuilt, kBlis09);
    ASSERT_FALSE(s.ok()) << value;
    EXPECT_EQ(s.code(), StatusCode::config_error);
    EXPECT_EQ(s.message(), "BLIS_ARCH_TYPE=" + value +
                               " names none of the kernels BLIS 0.9.0 has here (skx = " +
                               id_of("skx") + ", haswell = " + id_of("haswell") +
                               ", zen3 = " + id_of("zen3") + ", zen2 = " + id_of("zen2") +
                               ", zen = " + id_of("zen") + ", generic = " + id_of("generic") +
                               "): set one of those numbers or unset it");
  }
}

TEST(CheckUserKernels, KernelsThisBlisWasNotBuiltWithAreRefused) {
  const Status s = check_user_kernels(id_of("zen3"), kZen5, {"skx", "generic"}, kBlis09);
  EXPECT_EQ(s.code(), StatusCode::config_error);
  EXPECT_NE(s.message().find("names none of the kernels"), std::string::npos) << s.message();
}

TEST(CheckUserKernels, KernelsTheCpuCannotRunAreRefused) {
  const Status s = check_user_kernels(id_of("skx"), kZen3, kBuilt, kBlis09);
  EXPECT_EQ(s.code(), StatusCode::config_error);
  EXPECT_EQ(s.message(), "BLIS_ARCH_TYPE=" + id_of("skx") +
                             " asks for BLIS's skx kernels, which this CPU cannot run: unset "
                             "it or choose from skx = " + id_of("skx") + ", haswell = " +
                             id_of("haswell") + ", zen3 = " + id_of("zen3") + ", zen2 = " +
                             id_of("zen2") + ", zen = " + id_of("zen") + ", generic = " +
                             id_of("generic"));
}

TEST(CheckUserKernels, LaterBlisReleasesCheckTheirOwnValues) {
  EXPECT_TRUE(check_user_kernels("zen5", kZen5, kBuilt, "1.0").ok());
}

}  // namespace
}  // namespace spw::blas
