#!/usr/bin/env bash
# cmake --install into a fresh prefix gives a tree that other projects build against: the
# header, the libraries, the Fortran .mod, a CMake package and spillway.pc. Consumers in
# C, C++ and Fortran (find_package) and in C (pkg-config) are built and run on 2 ranks.
# Usage: install_test.sh BUILD_DIR CONSUMER_SOURCE_DIR MPIEXEC [MPIEXEC FLAGS...]
set -u
build=$1 consumer=$2 mpiexec=$3
shift 3
mpi_flags=("$@")
source "$(dirname "$0")/../cli/cli_support.sh"
prefix=$work/prefix
run2() {  # run2 OUTFILE PROGRAM: on 2 ranks, output to OUTFILE
  local out=$1; shift
  timeout 60 "$mpiexec" -n 2 "${mpi_flags[@]}" -x OMP_NUM_THREADS=1 "$@" > "$out" 2>&1
}

cmake --install "$build" --prefix "$prefix" > "$work/install.txt" 2>&1
check "cmake --install succeeds" test $? -eq 0
libdir=$(dirname "$(find "$prefix" -name libspillway.so -print -quit)")
for file in include/spillway/spillway.h include/spillway/spillway.mod bin/spillway; do
  check "installs $file" test -f "$prefix/$file"
done
check "installs libspillway.so" test -f "$libdir/libspillway.so"
check "installs libspillway_fortran.so" test -f "$libdir/libspillway_fortran.so"
check "installs the CMake package" test -f "$libdir/cmake/spillway/spillwayConfig.cmake"
check "installs spillway.pc" test -f "$libdir/pkgconfig/spillway.pc"
check "the installed library finds its dependencies" \
  bash -c "! ldd '$libdir/libspillway.so' | grep -q 'not found'"

# A library built with sanitizers (the asan preset) needs their runtimes loaded first in
# every program that uses it: its consumers are built with the same -fsanitize flags.
sanitize=$(sed -n 's/^CMAKE_CXX_FLAGS:[A-Z]*=.*\(-fsanitize=[^ ]*\).*/\1/p' "$build/CMakeCache.txt")
consumer_flags=()
[ -z "$sanitize" ] || for lang in C CXX Fortran; do
  consumer_flags+=("-DCMAKE_${lang}_FLAGS=$sanitize")
done
cmake -S "$consumer" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
  "${consumer_flags[@]}" > "$work/configure.txt" 2>&1
status=$?
check "find_package(spillway CONFIG) configures" test $status -eq 0
[ $status -eq 0 ] || cat "$work/configure.txt"
cmake --build "$work/build" > "$work/build.txt" 2>&1
status=$?
check "C, C++ and Fortran consumers build" test $status -eq 0
[ $status -eq 0 ] || cat "$work/build.txt"
for lang in c cxx fortran; do
  run2 "$work/$lang.txt" "$work/build/consumer_$lang"
  status=$?
  check "consumer_$lang runs" test $status -eq 0
  check "consumer_$lang prints a loss" grep -qE "^consumer_$lang: loss [0-9]+\.[0-9]{4}$" "$work/$lang.txt"
  [ $status -eq 0 ] || cat "$work/$lang.txt"
done

# pkg-config users link the same library; the run path is theirs to choose, as for any
# library installed outside the loader's default path.
flags=$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs spillway)
check "pkg-config spillway gives flags" test -n "$flags"
cc -std=c99 -pedantic-errors -Wall -Werror $sanitize "$consumer/consumer.c" $flags \
  -Wl,-rpath,"$libdir" -o "$work/consumer_pc" > "$work/pc.txt" 2>&1
check "a C consumer builds with pkg-config" test $? -eq 0
run2 "$work/pc_run.txt" "$work/consumer_pc"
check "and runs" grep -qE "^consumer_c: loss" "$work/pc_run.txt"

finish
