#!/usr/bin/env bash
# The library is usable from another CMake project: install it into a temporary prefix, then
# build and run examples/embed against it with find_package(tollgate).
set -euo pipefail
build_dir=$1
source_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
test -f "$work/prefix/include/tollgate/limiter.h"
test -f "$work/prefix/lib/cmake/tollgate/tollgateConfig.cmake"

# The installed library was built with this build's flags (sanitizers under `make test`).
flags=$(sed -n 's/^CMAKE_CXX_FLAGS:STRING=//p' "$build_dir/CMakeCache.txt")
if grep -q '^TOLLGATE_SANITIZE:BOOL=ON' "$build_dir/CMakeCache.txt"; then
  flags="$flags -fsanitize=address,undefined -fno-omit-frame-pointer"
fi
cmake -S "$source_dir/examples/embed" -B "$work/embed" -G Ninja \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_CXX_FLAGS="$flags" >/dev/null
cmake --build "$work/embed" >/dev/null
output=$("$work/embed/embed")
echo "$output"
test "$output" = "allowed 10 of 100, then 5 after one second"
