#!/usr/bin/env bash
# The layers of src/ are enforced by the build (cmake/Layers.cmake): the tree passes the
# include check, and a deliberate backward include or call fails it.
set -euo pipefail
build_dir=$1
source_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The tree as it is: every #include "src/..." runs downwards.
cmake -DSOURCE_DIR="$source_dir" -P "$source_dir/cmake/Layers.cmake"

# A scratch tree where core includes the server, a public header includes a private one, and
# a folder belongs to no layer: each is named, and the check fails.
mkdir -p "$work/tree/src/core" "$work/tree/src/store/memory" "$work/tree/src/elsewhere" \
  "$work/tree/include/tollgate"
printf '#include "src/core/clock.h"\n#include "src/server/metrics.h"\n' \
  >"$work/tree/src/core/backward.cc"
printf '#include "src/algorithm/share.h"\n#include "src/core/batch.h"\n' \
  >"$work/tree/src/store/memory/downward.cc"
printf '#include "src/core/batch.h"\n' >"$work/tree/include/tollgate/public.h"
printf '// nothing\n' >"$work/tree/src/elsewhere/thing.h"
if cmake -DSOURCE_DIR="$work/tree" -P "$source_dir/cmake/Layers.cmake" >"$work/include.log" 2>&1; then
  echo "FAIL: the include check accepted a backward include"
  exit 1
fi
cat "$work/include.log"
grep -q 'src/core/backward.cc: includes src/server/metrics.h: layer core may not use layer server' \
  "$work/include.log"
grep -q 'include/tollgate/public.h: includes src/core/batch.h: the public API may not use' \
  "$work/include.log"
grep -q 'src/elsewhere is in no layer' "$work/include.log"
if grep -q 'downward.cc' "$work/include.log"; then
  echo "FAIL: a downward include was refused"
  exit 1
fi

# A backward call: core's library linked as its link check is, with one more object that
# calls the memory store (a layer above core). The build must fail on that very symbol.
if ! grep -q '^TOLLGATE_CHECK_LAYERS:BOOL=ON' "$build_dir/CMakeCache.txt"; then
  echo "TOLLGATE_CHECK_LAYERS is off in $build_dir: the link check is not built"
  exit 77
fi
if cmake --build "$build_dir" --target tollgate_layer_backward_call >"$work/link.log" 2>&1; then
  echo "FAIL: a backward call linked"
  exit 1
fi
grep 'undefined reference' "$work/link.log"
grep -q 'undefined reference to .tollgate::MemoryStore::Create' "$work/link.log"
# What core's own link check links, with nothing added, passes.
cmake --build "$build_dir" --target tollgate_core_link_check >/dev/null
echo "layers: a backward include and a backward call both fail the build"
