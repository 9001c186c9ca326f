// report.json's run summary and what a job prints about BLIS's kernels.
#include <gtest/gtest.h>

#include "runtime/report.hpp"

namespace spw {
namespace {

TEST(DescribeKernelChoice, SaysNothingWhenBlisChoseItsOwnVectorKernels) {
  EXPECT_EQ(describe_kernel_choice(
                {.kernels = "zen3", .arch_type = 6, .chosen_by = "BLIS", .warning = ""}),
            "");
}

TEST(DescribeKernelChoice, NamesTheKernelsAndWhoChoseThem) {
  EXPECT_EQ(describe_kernel_choice({.kernels = "skx",
                                    .arch_type = 0,
                                    .chosen_by = "spillway: BLIS 0.9.0 does not know AMD "
                                                 "family 0x1a and would run its generic kernels",
                                    .warning = ""}),
            "spillway: BLIS runs its skx kernels, chosen by spillway: BLIS 0.9.0 does not know "
            "AMD family 0x1a and would run its generic kernels\n");
}

TEST(DescribeKernelChoice, WarnsOnItsOwnLine) {
  EXPECT_EQ(describe_kernel_choice({.kernels = "generic",
                                    .arch_type = 25,
                                    .chosen_by = "BLIS",
                                    .warning = "BLIS runs its generic kernels, several times "
                                               "slower"}),
            "spillway: warning: BLIS runs its generic kernels, several times slower\n");
}

TEST(MakeReport, RecordsTheBlasKernels) {
  RunRecord run;
  run.item_name = "tokens";
  run.loss = {2.0};
  run.step_seconds = {0.5};
  run.blas = {.kernels = "skx",
              .arch_type = 0,
              .chosen_by = "BLIS_ARCH_TYPE=0, set before spillway started",
              .warning = ""};
  const nlohmann::json report = make_report(run, 100.0, MemoryLedger::process().snapshot());
  EXPECT_EQ(report["blas"]["kernels"], "skx");
  EXPECT_EQ(report["blas"]["arch_type"], 0);
  EXPECT_EQ(report["blas"]["chosen_by"], "BLIS_ARCH_TYPE=0, set before spillway started");
  EXPECT_DOUBLE_EQ(report["throughput"]["median"].get<double>(), 200.0);
}

}  // namespace
}  // namespace spw
