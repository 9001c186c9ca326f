// The progress line of a training run: redrawn in place on a terminal, plain lines in a
// batch log (every `every` steps and the last one, so logs stay short and comparable).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace spw {

struct ProgressLine {
  std::int64_t step = 0;
  std::int64_t total_steps = 0;
  double loss = 0;
  double items_per_second = 0;
  const char* item_name = "tokens";
  double elapsed_seconds = 0;
  std::size_t peak_bytes = 0;
};

class ProgressPrinter {
 public:
  // `stream` is a terminal when isatty says so and `redraw` allows it; `every` = 0 picks
  // about 100 lines per run. Under mpirun every rank's stdout is a pseudo-terminal even
  // when the job's output goes to a file, so MPI runs pass redraw = false.
  ProgressPrinter(std::FILE* stream, std::int64_t total_steps, std::int64_t every = 0,
                  bool redraw = true);
  void print(const ProgressLine& line);
  // Ends the in-place line on a terminal.
  void finish();

  static std::string format(const ProgressLine& line);  // without terminal control codes

 private:
  std::FILE* stream_;
  bool terminal_;
  std::int64_t every_;
  bool drawn_ = false;
};

std::string format_duration(double seconds);  // "0:07", "12:03", "1:02:03"

// Seconds from `start` to now on the steady clock.
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace spw
