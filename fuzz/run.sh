#!/usr/bin/env bash
# `make fuzz`: builds the fuzz targets with clang++ and libFuzzer (ASan + UBSan) in their own
# build directory and runs each for FUZZ_SECONDS (default 60), starting from the committed
# corpus. New inputs go to BUILD/corpus/<target>/ (not the repository); a crash leaves
# BUILD/crash-* and stops with exit 1: add the file to fuzz/corpus/<target>/ with the fix.
#   fuzz/run.sh [BUILD_DIR] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=${1:-build-fuzz}
shift || true
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
JOBS=${JOBS:-$(nproc)}

if [ ! -f "$BUILD/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTOLLGATE_FUZZ=ON -DTOLLGATE_SANITIZE=ON -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link \
    -DTOLLGATE_BUILD_TESTS=OFF -DTOLLGATE_BUILD_BENCH=OFF >/dev/null
fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for source in fuzz/*_fuzz.cc; do targets+=("$(basename "$source" .cc)"); done
fi
cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}"
for target in "${targets[@]}"; do
  mkdir -p "$BUILD/corpus/$target"
  echo "fuzz: $target for ${FUZZ_SECONDS}s"
  status=0
  (cd "$BUILD" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "fuzz/$target" -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=4096 \
    -print_final_stats=1 "corpus/$target" "$ROOT/fuzz/corpus/$target" \
    >"fuzz-$target.log" 2>&1) || status=$?
  tail -n 15 "$BUILD/fuzz-$target.log"
  if [ "$status" -ne 0 ]; then
    echo "fuzz: $target failed (exit $status); log $BUILD/fuzz-$target.log, input in $BUILD/"
    exit 1
  fi
done
echo "fuzz: no crash in ${targets[*]}"
