#include "runtime/report.hpp"

#include "runtime/trainer.hpp"

#include <algorithm>

namespace spw {

double median_items_per_second(const std::vector<double>& step_seconds, double items_per_step) {
  std::vector<double> times(step_seconds.begin() + (step_seconds.size() > 1 ? 1 : 0),
                            step_seconds.end());
  if (times.empty()) return 0;
  std::sort(times.begin(), times.end());
  const double median = times.size() % 2 == 1
                            ? times[times.size() / 2]
                            : 0.5 * (times[times.size() / 2 - 1] + times[times.size() / 2]);
  return median > 0 ? items_per_step / median : 0;
}

std::string describe_kernel_choice(const blas::KernelChoice& choice) {
  std::string text;
  if (choice.chosen_by != "BLIS") {
    text += "spillway: BLIS runs its " + choice.kernels + " kernels, chosen by " +
            choice.chosen_by + "\n";
  }
  if (!choice.warning.empty()) text += "spillway: warning: " + choice.warning + "\n";
  return text;
}

void record_step(RunRecord& run, const StepResult& step) {
  run.loss.push_back(step.loss);
  run.step_seconds.push_back(step.seconds);
  run.learning_rate.push_back(step.learning_rate);
  if (step.grad_norm) run.grad_norm.push_back(*step.grad_norm);
}

void record_evaluation(RunRecord& run, std::FILE* log, const RunRecord::Evaluation& evaluation,
                       int batches) {
  run.evaluations.push_back(evaluation);
  if (log == nullptr) return;
  std::fprintf(log, "step %lld: eval loss %.4f on %d held-out batch%s, %.2f s\n",
               static_cast<long long>(evaluation.step), evaluation.loss, batches,
               batches == 1 ? "" : "es", evaluation.seconds);
  std::fflush(log);
}

nlohmann::json make_report(const RunRecord& run, double items_per_step,
                           const LedgerSnapshot& memory) {
  nlohmann::json peak = nlohmann::json::object();
  nlohmann::json current = nlohmann::json::object();
  for (MemoryCategory c : kAllMemoryCategories) {
    peak[std::string(memory_category_name(c))] = memory.peak_of(c);
    current[std::string(memory_category_name(c))] = memory.current_of(c);
  }
  nlohmann::json report;
  report["config"] = run.config;
  report["data"] = run.data;
  report["ranks"] = run.ranks;
  report["threads"] = run.threads;
  report["blas"] = {{"kernels", run.blas.kernels},
                    {"arch_type", run.blas.arch_type},
                    {"chosen_by", run.blas.chosen_by}};
  report["parameters"] = run.parameters;
  report["steps"] = run.loss.size();
  report["loss"] = run.loss;
  report["step_seconds"] = run.step_seconds;
  report["learning_rate"] = run.learning_rate;
  if (!run.grad_norm.empty()) report["grad_norm"] = run.grad_norm;
  report["elapsed_seconds"] = run.elapsed_seconds;
  report["throughput"] = {
      {"unit", run.item_name + "/s"},
      {"median", median_items_per_second(run.step_seconds, items_per_step)},
      {"items_per_step", items_per_step},
  };
  if (!run.test_accuracy.empty()) report["test_accuracy"] = run.test_accuracy;
  if (!run.evaluations.empty()) {
    nlohmann::json evaluations = nlohmann::json::array();
    for (const RunRecord::Evaluation& e : run.evaluations) {
      evaluations.push_back({{"step", e.step}, {"loss", e.loss}, {"seconds", e.seconds}});
    }
    report["eval"] = std::move(evaluations);
  }
  report["memory"] = {
      {"peak_bytes", memory.peak_total},
      {"peak_bytes_by_category", peak},
      {"cap_bytes", memory.cap ? nlohmann::json(*memory.cap) : nlohmann::json(nullptr)},
  };
  return report;
}

}  // namespace spw
