# Compiler defects that change results, checked by running the smallest program that shows
# each, with the flags every spillway target gets; a defect found adds the flag that avoids it.
#
# Debian 12's GCC 12.2, with AVX-512 enabled (-march=native on an AVX-512 machine, at -O2 and
# above), miscompiles a local array whose first half repeats one value and whose second half
# is zero, copied as a whole (the basic-block SLP vectoriser's constant): {7, 7, 0, 0} of
# int64 is stored as {7, 7, 7, 7}, eight floats {1, 1, 1, 1, 0, 0, 0, 0} as all ones. A
# std::vector built from such an initializer list gets the wrong values. Found on the Zen 4
# VM in a test's {100, 100, 0, 0}. Loop vectorisation and intrinsics are unaffected, so the
# cost of turning the basic-block vectoriser off is small (README, "Compiler defects").
include(CheckCXXSourceRuns)
include(CMakePushCheckState)

cmake_push_check_state(RESET)
set(CMAKE_REQUIRED_FLAGS "-O2")
if(SPILLWAY_NATIVE)
  string(APPEND CMAKE_REQUIRED_FLAGS " -march=native")
endif()
check_cxx_source_runs([[
#include <cstring>
__attribute__((noinline)) void fill(long long* out) {
  const long long halves[4] = {7, 7, 0, 0};
  std::memcpy(out, halves, sizeof halves);
}
int main() {
  long long out[4];
  fill(out);
  return out[0] == 7 && out[1] == 7 && out[2] == 0 && out[3] == 0 ? 0 : 1;
}
]] SPILLWAY_SLP_CONSTANTS_RIGHT)
cmake_pop_check_state()

if(NOT SPILLWAY_SLP_CONSTANTS_RIGHT)
  message(STATUS "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION} stores half-zero "
                 "vector constants wrongly here: building with -fno-tree-slp-vectorize")
  target_compile_options(spillway_build_flags INTERFACE -fno-tree-slp-vectorize)
endif()
