#include "runtime/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "kernels/memory_ledger.hpp"

namespace spw {

std::string format_duration(double seconds) {
  const auto total = static_cast<long long>(std::llround(std::max(0.0, seconds)));
  const long long h = total / 3600, m = (total / 60) % 60, s = total % 60;
  char text[32];
  if (h > 0) {
    std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", h, m, s);
  } else {
    std::snprintf(text, sizeof text, "%lld:%02lld", m, s);
  }
  return text;
}

ProgressPrinter::ProgressPrinter(std::FILE* stream, std::int64_t total_steps, std::int64_t every,
                                 bool redraw)
    : stream_(stream),
      terminal_(redraw && isatty(fileno(stream)) == 1),
      every_(every > 0 ? every : std::max<std::int64_t>(1, total_steps / 100)) {}

std::string ProgressPrinter::format(const ProgressLine& line) {
  const double per_step = line.step > 0 ? line.elapsed_seconds / static_cast<double>(line.step) : 0;
  const double eta = per_step * static_cast<double>(line.total_steps - line.step);
  char text[256];
  std::snprintf(text, sizeof text,
                "step %lld/%lld  loss %.4f  %.0f %s/s  elapsed %s  eta %s  peak %s",
                static_cast<long long>(line.step), static_cast<long long>(line.total_steps),
                line.loss, line.items_per_second, line.item_name,
                format_duration(line.elapsed_seconds).c_str(), format_duration(eta).c_str(),
                format_bytes(line.peak_bytes).c_str());
  return text;
}

void ProgressPrinter::print(const ProgressLine& line) {
  const std::string text = format(line);
  if (terminal_) {
    std::fprintf(stream_, "\r%s\033[K", text.c_str());
    drawn_ = true;
  } else if (line.step % every_ == 0 || line.step == line.total_steps || line.step == 1) {
    std::fprintf(stream_, "%s\n", text.c_str());
  }
  std::fflush(stream_);
}

void ProgressPrinter::finish() {
  if (terminal_ && drawn_) std::fprintf(stream_, "\n");
  drawn_ = false;
  std::fflush(stream_);
}

}  // namespace spw
