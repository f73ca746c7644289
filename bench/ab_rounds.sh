#!/usr/bin/env bash
# Two builds of one Google Benchmark target, run alternately on the same machine: on a VM
# whose speed moves by 2x from second to second, only rounds taken turn about compare.
# Prints, per benchmark row, the median and best items_per_second of each build over the
# rounds, and the ratio of the medians (after / before).
#
#   bench/ab_rounds.sh BEFORE_BINARY AFTER_BINARY [BENCHMARK_ARGS...]
#
# e.g. (a build of the previous commit in /tmp/before; TOLLGATE_BENCH_QUICK=1 shortens the
# 1M-key rows):
#   TOLLGATE_BENCH_QUICK=1 ROUNDS=6 bench/ab_rounds.sh /tmp/before/bench/memory_bench \
#     build-rel/bench/memory_bench --benchmark_min_time=0.3 \
#     --benchmark_filter='CheckOneHotKey/./real_time/threads:1$'
#
# Environment: ROUNDS=6 (each round runs before, then after).
set -euo pipefail
if [ $# -lt 2 ]; then
  sed -n '2,14p' "$0" >&2
  exit 2
fi
before=$1
after=$2
shift 2
rounds=${ROUNDS:-6}
samples=$(mktemp)
trap 'rm -f "$samples"' EXIT
for _ in $(seq "$rounds"); do
  for build in before after; do
    binary=$before
    [ "$build" = after ] && binary=$after
    "$binary" "$@" 2>/dev/null | awk -v build="$build" '
      /^BM_/ { for (i = 1; i <= NF; i++) if ($i ~ /^items_per_second=/) {
                 # Not a repeated row'"'"'s coefficient of variation (a percentage).
                 split($i, kv, "="); if (kv[2] !~ /%$/) print build, $1, kv[2] } }' >>"$samples"
  done
done
python3 - "$samples" "$rounds" <<'PY'
import collections, statistics, sys
units = {"k": 1e3, "M": 1e6, "G": 1e9}
def per_second(text):
    text = text.removesuffix("/s")
    return float(text[:-1]) * units[text[-1]] if text[-1] in units else float(text)
rows = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    build, name, value = line.split()
    rows[name][build].append(per_second(value))
print(f"{sys.argv[2]} alternating rounds; items per second, median (best)\n")
print("| row | before | after | after / before (medians) |")
print("|---|---|---|---|")
for name, builds in rows.items():
    b, a = builds["before"], builds["after"]
    if not b or not a:
        continue
    cell = lambda v: f"{statistics.median(v) / 1e6:.2f}M ({max(v) / 1e6:.2f}M)"
    print(f"| {name} | {cell(b)} | {cell(a)} | {statistics.median(a) / statistics.median(b):.2f}x |")
PY
