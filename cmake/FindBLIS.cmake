# Finds BLIS. Debian ships no pkg-config file for it, so look for blis.h and libblis,
# preferring the OpenMP build: spillway runs GCC's libgomp only, and the pthreads or
# serial BLIS builds would either start a second thread pool or ignore our threads.
#
# Result: BLIS_FOUND, BLIS_INCLUDE_DIR, BLIS_LIBRARY and the imported target BLIS::BLIS.
include(FindPackageHandleStandardArgs)

set(_blis_arch_dir "${CMAKE_LIBRARY_ARCHITECTURE}")
find_path(BLIS_INCLUDE_DIR blis.h
  HINTS ENV BLIS_ROOT
  PATH_SUFFIXES include/${_blis_arch_dir}/blis-openmp include/blis-openmp include/blis include
  PATHS /usr /usr/local)
find_library(BLIS_LIBRARY NAMES blis
  HINTS ENV BLIS_ROOT
  PATH_SUFFIXES lib/${_blis_arch_dir}/blis-openmp lib/blis-openmp lib/${_blis_arch_dir} lib lib64
  PATHS /usr /usr/local
  NO_DEFAULT_PATH)
if(NOT BLIS_LIBRARY)
  find_library(BLIS_LIBRARY NAMES blis)
endif()

if(BLIS_INCLUDE_DIR AND EXISTS "${BLIS_INCLUDE_DIR}/blis.h")
  file(STRINGS "${BLIS_INCLUDE_DIR}/blis.h" _blis_openmp REGEX "^#define BLIS_ENABLE_OPENMP$")
  if(NOT _blis_openmp)
    message(WARNING "BLIS at ${BLIS_INCLUDE_DIR} is not the OpenMP build; install libblis-openmp-dev")
  endif()
endif()

find_package_handle_standard_args(BLIS REQUIRED_VARS BLIS_LIBRARY BLIS_INCLUDE_DIR)

if(BLIS_FOUND AND NOT TARGET BLIS::BLIS)
  add_library(BLIS::BLIS UNKNOWN IMPORTED)
  set_target_properties(BLIS::BLIS PROPERTIES
    IMPORTED_LOCATION "${BLIS_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${BLIS_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "m")
endif()
mark_as_advanced(BLIS_INCLUDE_DIR BLIS_LIBRARY)
