#include "offload/transfer_rate.hpp"

#include <algorithm>

namespace spw::offload {

CombinedRate combined_rate(std::vector<EngineTransfer> transfers) {
  CombinedRate rate;
  std::sort(transfers.begin(), transfers.end(),
            [](const EngineTransfer& a, const EngineTransfer& b) { return a.start_s < b.start_s; });
  bool open = false;
  double from = 0, to = 0;
  for (const EngineTransfer& t : transfers) {
    rate.bytes += t.bytes;
    if (t.end_s < t.start_s) continue;
    if (open && t.start_s <= to) {
      to = std::max(to, t.end_s);
      continue;
    }
    if (open) rate.busy_s += to - from;
    open = true;
    from = t.start_s;
    to = t.end_s;
  }
  if (open) rate.busy_s += to - from;
  return rate;
}

}  // namespace spw::offload
