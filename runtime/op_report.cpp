#include "runtime/op_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "runtime/mpi_support.hpp"

namespace spw {

namespace {

nlohmann::json make_time_by_op(const OpTimes& total, std::int64_t steps, double step_seconds) {
  const double n = static_cast<double>(std::max<std::int64_t>(steps, 1));
  const double step = step_seconds / n;
  std::vector<std::size_t> ran;
  for (std::size_t i = 0; i < kOpCount; ++i) {
    if (total.calls[i] > 0) ran.push_back(i);
  }
  std::stable_sort(ran.begin(), ran.end(), [&](std::size_t a, std::size_t b) {
    return total.seconds[a] > total.seconds[b];
  });
  nlohmann::json ops = nlohmann::json::array();
  for (std::size_t i : ran) {
    const double seconds = total.seconds[i] / n;
    ops.push_back({{"op", std::string(op_name(static_cast<KernelOp>(i)))},
                   {"seconds_per_step", seconds},
                   {"calls_per_step", static_cast<double>(total.calls[i]) / n},
                   {"share_of_step", step > 0 ? seconds / step : 0.0}});
  }
  return {{"steps", steps},
          {"step_seconds", step},
          {"ops", ops},
          {"all_ops_share_of_step", step > 0 ? total.total_seconds() / n / step : 0.0}};
}

}  // namespace

void StepOpTimes::end_step(double step_seconds) {
  // The first step allocates and warms up; a run of one step has only that one to show.
  if (seen_++ == 1) {
    total_ = OpTimes{};
    counted_ = 0;
    step_seconds_ = 0;
  }
  total_ += op_times().since(before_);
  step_seconds_ += step_seconds;
  ++counted_;
}

nlohmann::json time_by_op(const StepOpTimes& times) {
  return make_time_by_op(times.total(), times.steps(), times.step_seconds());
}

std::string describe_time_by_op(const nlohmann::json& time_by_op, int shown) {
  std::string text;
  double listed = 0;
  int count = 0;
  char part[96];
  for (const nlohmann::json& op : time_by_op.at("ops")) {
    if (count == shown) break;
    const double share = op.at("share_of_step").get<double>();
    std::snprintf(part, sizeof part, "%s%s %.0f%%", text.empty() ? "" : ", ",
                  op.at("op").get<std::string>().c_str(), 100 * share);
    text += part;
    listed += share;
    ++count;
  }
  const double all = time_by_op.at("all_ops_share_of_step").get<double>();
  if (static_cast<std::size_t>(count) < time_by_op.at("ops").size()) {
    std::snprintf(part, sizeof part, ", other ops %.0f%%", 100 * std::max(0.0, all - listed));
    text += part;
  }
  std::snprintf(part, sizeof part, "%soutside ops %.0f%%", text.empty() ? "" : ", ",
                100 * std::max(0.0, 1 - all));
  return text + part;
}

Result<GatheredTimeByOp> gather_time_by_op(const StepOpTimes& times, MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  constexpr std::size_t kStride = 2 + 2 * kOpCount;
  std::vector<double> mine = {static_cast<double>(times.steps()), times.step_seconds()};
  for (double s : times.total().seconds) mine.push_back(s);
  for (std::int64_t c : times.total().calls) mine.push_back(static_cast<double>(c));
  std::vector<double> all(rank == 0 ? kStride * static_cast<std::size_t>(size) : 0);
  SPW_TRY(mpi_check(MPI_Gather(mine.data(), static_cast<int>(kStride), MPI_DOUBLE, all.data(),
                               static_cast<int>(kStride), MPI_DOUBLE, 0, comm),
                    "gathering each rank's time by op"));
  GatheredTimeByOp result;
  if (rank != 0) return result;
  OpTimes sum;
  double step_seconds = 0;
  for (int r = 0; r < size; ++r) {
    const double* v = all.data() + kStride * static_cast<std::size_t>(r);
    OpTimes total;
    for (std::size_t i = 0; i < kOpCount; ++i) {
      total.seconds[i] = v[2 + i];
      total.calls[i] = std::llround(v[2 + kOpCount + i]);
    }
    result.ranks.push_back(make_time_by_op(total, std::llround(v[0]), v[1]));
    sum += total;
    step_seconds += v[1];
  }
  // Every rank runs the same steps.
  result.all_ranks = make_time_by_op(sum, std::llround(all[0]), step_seconds);
  return result;
}

}  // namespace spw
