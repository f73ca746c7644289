#!/usr/bin/env bash
# Instructions, data reads and data writes (stores, including pushes and spills) per
# MemoryStore::CheckOne on one hot key, counted by callgrind: deterministic, so a change of a
# few percent shows where timed runs on a noisy VM cannot show it. Counts are inclusive (every
# function CheckOne calls) and come from the calls the benchmark loop makes.
#
#   bench/callgrind_check.sh MEMORY_BENCH_BINARY [ALGORITHM...]
#
# ALGORITHM: 0 token bucket, 1 fixed window, 2 sliding window (default: all three).
# PREPARED=1: the checks through a PreparedLimit (BM_MemoryStoreCheckOnePreparedHotKey), not
# through a Limit. Needs valgrind (scripts/bootstrap installs it with the benchmark tools).
set -euo pipefail
if [ $# -lt 1 ]; then
  sed -n '2,11p' "$0" >&2
  exit 2
fi
binary=$1
shift
algorithms=("$@")
[ ${#algorithms[@]} -gt 0 ] || algorithms=(0 1 2)
row=
[ "${PREPARED:-0}" = 1 ] && row=Prepared
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for algorithm in "${algorithms[@]}"; do
  TOLLGATE_BENCH_QUICK=1 valgrind --tool=callgrind --cache-sim=yes --callgrind-out-file="$out" \
    "$binary" --benchmark_filter="BM_MemoryStoreCheckOne${row}HotKey/$algorithm/.*threads:1\$" \
    --benchmark_min_time=0.05 >/dev/null 2>&1
  python3 - "$out" "$algorithm" "$row" <<'PY'
import re, sys
names, events, cost, calls = {}, None, None, 0
in_bench = to_check_one = False
lines = open(sys.argv[1]).read().split("\n")
i = 0
while i < len(lines):
    line = lines[i]
    if line.startswith("events:"):
        events = line.split()[1:]
    match = re.match(r"^(fn|cfn)=\((\d+)\)(?: (.*))?$", line)
    if match:
        kind, ident, name = match.groups()
        if name:
            names[ident] = name
        if kind == "fn":
            in_bench = f"BM_MemoryStoreCheckOne{sys.argv[3]}HotKey(" in names.get(ident, "")
        else:
            to_check_one = "MemoryStoreImpl::CheckOne(" in names.get(ident, "")
    elif line.startswith("calls=") and in_bench and to_check_one:
        calls += int(line.split("=")[1].split()[0])
        values = [int(v) for v in lines[i + 1].split()[1:]]
        values += [0] * (len(events) - len(values))
        cost = values if cost is None else [a + b for a, b in zip(cost, values)]
        i += 1
    i += 1
if not calls:
    sys.exit("no CheckOne calls found (is this a memory_bench binary with symbols?)")
per = {event: total / calls for event, total in zip(events, cost)}
name = ["token bucket", "fixed window", "sliding window"][int(sys.argv[2])]
print(f"{name}: {per['Ir']:.0f} instructions, {per['Dr']:.0f} data reads, "
      f"{per['Dw']:.0f} data writes per CheckOne ({calls} calls)")
PY
done
