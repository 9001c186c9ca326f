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
  EXPECT_EQ(report["learning_rate"], nlohmann::json::array());
  EXPECT_FALSE(report.contains("grad_norm")) << "no clipping, no norms";
}

TEST(MakeReport, RecordsEachStepsRateAndGradientNorm) {
  RunRecord run;
  run.item_name = "tokens";
  run.loss = {2.0, 1.5};
  run.step_seconds = {0.5, 0.4};
  run.learning_rate = {1e-4, 2e-4};
  run.grad_norm = {3.5, 2.25};
  const nlohmann::json report = make_report(run, 100.0, MemoryLedger::process().snapshot());
  EXPECT_EQ(report["learning_rate"], nlohmann::json({1e-4, 2e-4}));
  EXPECT_EQ(report["grad_norm"], nlohmann::json({3.5, 2.25}));
}

}  // namespace
}  // namespace spw
