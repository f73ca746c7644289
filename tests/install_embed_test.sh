#!/usr/bin/env bash
# The library is usable from another CMake project: install it into a temporary prefix, then
# build examples/embed against it with find_package(tollgate) and run it: the production
# stack (tollgate::Fleet) in memory, and on a redis-server of its own when one is installed.
# The installed headers are the whole public API: tollgate.h includes every one of them, and
# none includes a private header.
set -euo pipefail
build_dir=$1
source_dir=$2
work=$(mktemp -d)
redis_pid=
cleanup() {
  [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
test -f "$work/prefix/include/tollgate/fleet.h"
test -f "$work/prefix/lib/cmake/tollgate/tollgateConfig.cmake"
for header in "$work/prefix/include/tollgate/"*.h; do
  name=$(basename "$header")
  [ "$name" = tollgate.h ] && continue
  grep -q "^#include \"tollgate/$name\"$" "$work/prefix/include/tollgate/tollgate.h" || {
    echo "FAIL: tollgate.h does not include tollgate/$name"
    exit 1
  }
done
if grep -l '#include "src/' "$work/prefix/include/tollgate/"*.h; then
  echo "FAIL: a public header includes a private one"
  exit 1
fi

# The installed library was built with this build's compiler and flags (clang with sanitizers
# under `make test`): the program is too.
compiler=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build_dir/CMakeCache.txt")
flags=$(sed -n 's/^CMAKE_CXX_FLAGS:STRING=//p' "$build_dir/CMakeCache.txt")
if grep -q '^TOLLGATE_SANITIZE:BOOL=ON' "$build_dir/CMakeCache.txt"; then
  flags="$flags -fsanitize=address,undefined -fno-omit-frame-pointer"
fi
cmake -S "$source_dir/examples/embed" -B "$work/embed" -G Ninja \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_CXX_COMPILER="$compiler" \
  -DCMAKE_CXX_FLAGS="$flags" >/dev/null
cmake --build "$work/embed" >/dev/null
output=$("$work/embed/embed")
echo "$output"
test "$output" = "allowed 10 of 100, then 5 after one second"

if ! command -v redis-server >/dev/null; then
  echo "redis-server not installed: the Redis run is skipped"
  exit 0
fi
redis_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
  >"$work/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 1 100); do
  redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
  sleep 0.1
done
"$work/embed/embed" "redis://127.0.0.1:$redis_port"
