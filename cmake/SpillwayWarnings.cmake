# One place for the flags every spillway target compiles with.
add_library(spillway_build_flags INTERFACE)
target_compile_options(spillway_build_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX,C>:-Wall -Wextra -Wpedantic -Wshadow>
  $<$<COMPILE_LANGUAGE:CXX>:-Wnon-virtual-dtor>
  $<$<BOOL:${SPILLWAY_WERROR}>:-Werror>
  $<$<BOOL:${SPILLWAY_NATIVE}>:-march=native>
  # Vectorised loops must not be held back by errno from math calls.
  -fno-math-errno)
