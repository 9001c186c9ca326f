#include "kernels/ops/write_prefetch.hpp"

namespace spw::ops {

bool prefetch_outputs_for_write() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool intel = [] {
    __builtin_cpu_init();
    return __builtin_cpu_is("intel") != 0;
  }();
  return intel;
#else
  return false;
#endif
}

}  // namespace spw::ops
