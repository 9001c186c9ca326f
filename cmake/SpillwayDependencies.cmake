# Every dependency comes from the system (Debian 12 packages, jobscripts/setup-deps.sh).
# Nothing is downloaded or vendored.
find_package(PkgConfig REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS C CXX)
find_package(MPI REQUIRED COMPONENTS C CXX)
find_package(BLIS REQUIRED)
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc>=2.0)
find_package(ZLIB REQUIRED)

set(HDF5_PREFER_PARALLEL ON)
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR "spillway needs the parallel (Open MPI) HDF5: install libhdf5-openmpi-dev")
endif()

pkg_check_modules(TOMLPP REQUIRED IMPORTED_TARGET tomlplusplus)
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 CONFIG QUIET)
if(NOT CLI11_FOUND)
  find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp REQUIRED)
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  set_target_properties(CLI11::CLI11 PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${CLI11_INCLUDE_DIR}")
endif()

if(SPILLWAY_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(SPILLWAY_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()

# GCC's libgomp only: BLIS (OpenMP build) links it, and so must we.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  message(WARNING "spillway is tested with GCC; another compiler may bring a second OpenMP runtime")
endif()
