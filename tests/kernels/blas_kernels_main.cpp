// The kernels BLIS runs in this process. BLIS chooses once per process, so ctest runs each
// case as its own process with BLIS_ARCH_TYPE unset (tests/kernels/CMakeLists.txt), and a
// case sets the variable itself before anything starts BLIS.
#include <blis.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "kernels/blas_kernels.hpp"
#include "kernels/threading.hpp"

namespace spw::blas {
namespace {

TEST(BlasKernels, AreVectorKernelsWhereTheCpuHasVectorUnits) {
  ASSERT_EQ(std::getenv("BLIS_ARCH_TYPE"), nullptr) << "run through ctest, which unsets it";
  const CpuFacts cpu = this_cpu();
  const std::optional<std::string> ours =
      kernels_for(cpu, bli_info_get_version_str(), built_kernels());
  auto setup = setup_threads({});
  ASSERT_TRUE(setup.ok()) << setup.status().message();
  const KernelChoice& choice = setup->blas;
  EXPECT_EQ(choice.kernels, bli_arch_string(bli_arch_query_id()));
  if (cpu.avx2_fma) {
    EXPECT_NE(choice.kernels, "generic");
    EXPECT_EQ(choice.warning, "");
  }
  if (ours) {
    EXPECT_EQ(choice.kernels, *ours);
    EXPECT_EQ(choice.chosen_by.rfind("spillway: BLIS ", 0), 0u) << choice.chosen_by;
    ASSERT_NE(std::getenv("BLIS_ARCH_TYPE"), nullptr);
    EXPECT_EQ(std::getenv("BLIS_ARCH_TYPE"), std::to_string(blis_arch_id(*ours)));
  } else {
    EXPECT_EQ(choice.chosen_by, "BLIS");
    EXPECT_EQ(std::getenv("BLIS_ARCH_TYPE"), nullptr);
  }
}

TEST(BlasKernels, TheUsersChoiceWinsAndGenericIsFlagged) {
  const std::string generic = std::to_string(blis_arch_id("generic"));
  ASSERT_EQ(setenv("BLIS_ARCH_TYPE", generic.c_str(), 1), 0);
  const Result<KernelChoice>& choice = choose_kernels();
  ASSERT_TRUE(choice.ok()) << choice.status().message();
  EXPECT_EQ(choice->kernels, "generic");
  EXPECT_EQ(choice->kernels, bli_arch_string(bli_arch_query_id()));
  EXPECT_EQ(choice->chosen_by, "BLIS_ARCH_TYPE=" + generic + ", set before spillway started");
  if (this_cpu().avx2_fma) {
    EXPECT_EQ(choice->warning.rfind("BLIS runs its generic kernels, several times slower", 0),
              0u)
        << choice->warning;
  }
}

TEST(BlasKernels, AnUnusableChoiceIsAnErrorNotAStoppedProcess) {
  ASSERT_EQ(setenv("BLIS_ARCH_TYPE", "fast", 1), 0);
  auto setup = setup_threads({});
  ASSERT_FALSE(setup.ok());
  EXPECT_EQ(setup.status().code(), StatusCode::config_error);
  EXPECT_EQ(setup.status().message().rfind("BLIS_ARCH_TYPE=fast names none of the kernels BLIS ",
                                           0),
            0u)
      << setup.status().message();
  // The first answer stands: a second call neither retries nor starts BLIS on the bad value.
  EXPECT_EQ(choose_kernels().status().message(), setup.status().message());
}

}  // namespace
}  // namespace spw::blas
