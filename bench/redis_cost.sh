#!/usr/bin/env bash
# What a decision costs Redis, where Redis is the bottleneck: Redis' own CPU per decision and
# decisions per Redis core (1 s of Redis CPU / CPU per decision), in one run (with tollgate's
# p50 latency and decisions per script call), for
#   - tollgate's exact checks through the library (bench/compare_driver, no deadline layer):
#     token bucket, fixed window, sliding window, and three limits in one request;
#   - plain INCR under redis-benchmark (pipelined 16 deep): the floor;
#   - envoyproxy/ratelimit's pattern: a pipelined INCRBY and EXPIRE per descriptor, no
#     script (redis-benchmark runs each command pipelined; a decision costs the two);
# at 1, 8, 64 and 512 callers (redis-benchmark clients). Redis' CPU is its user + system
# time from INFO (used_cpu_user, used_cpu_sys) over each row; each row runs on a fresh
# redis-server pinned to one core where taskset allows. Prints a Markdown table.
#
#   bench/redis_cost.sh [BUILD_DIR]      (default: build; needs bench/compare_driver)
#
# Environment: SECONDS_PER_ROW (default 5), CALLERS ("1 8 64 512"), ROWS (default: all of
# "token_bucket fixed_window sliding_window multi incr peer").
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
SECONDS_PER_ROW=${SECONDS_PER_ROW:-5}
CALLERS=${CALLERS:-"1 8 64 512"}
ROWS=${ROWS:-"token_bucket fixed_window sliding_window multi incr peer"}
DRIVER="$BUILD/bench/compare_driver"
[ -x "$DRIVER" ] || { echo "redis_cost: $DRIVER not built (cmake --build $BUILD --target compare_driver)" >&2; exit 1; }

WORK=$(mktemp -d)
REDIS_PID=
stop_redis() {
  if [ -n "$REDIS_PID" ]; then
    redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || kill "$REDIS_PID" 2>/dev/null || true
    wait "$REDIS_PID" 2>/dev/null || true
    REDIS_PID=
  fi
}
trap 'stop_redis; rm -rf "$WORK"' EXIT

# Redis on core 0 (and the load on the others) when there are several.
PIN_REDIS=()
PIN_LOAD=()
if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
  PIN_REDIS=(taskset -c 0)
  PIN_LOAD=(taskset -c "1-$(($(nproc) - 1))")
fi

start_redis() {
  PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "${PIN_REDIS[@]}" redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$WORK" --loglevel warning --maxclients 10000 >"$WORK/redis.log" 2>&1 &
  REDIS_PID=$!
  for _ in $(seq 100); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && return; sleep 0.1; done
  echo "redis_cost: redis-server did not start" >&2
  exit 1
}

# Redis' user + system CPU seconds so far.
redis_cpu() {
  redis-cli -p "$PORT" INFO cpu | tr -d '\r' |
    awk -F: '/^used_cpu_user:/ {u = $2} /^used_cpu_sys:/ {s = $2} END {printf "%.6f", u + s}'
}

# Commands of `name` Redis has executed so far (INFO commandstats).
executed() {
  redis-cli -p "$PORT" INFO commandstats | tr -d '\r' |
    awk -F'[=,:]' -v cmd="cmdstat_$1" '$1 == cmd {print $3; found = 1} END {if (!found) print 0}'
}

# One row: its name, callers, decisions, Redis CPU seconds, and for tollgate's rows the p50
# latency (µs) and the script calls Redis ran.
row() {
  local name=$1 callers=$2 decisions=$3 cpu=$4 p50=${5:-} calls=${6:-}
  awk -v n="$name" -v c="$callers" -v d="$decisions" -v cpu="$cpu" -v p50="$p50" \
    -v calls="$calls" 'BEGIN {
    us = d > 0 ? cpu * 1e6 / d : 0
    per_core = us > 0 ? 1e6 / us : 0
    per_call = calls > 0 ? sprintf("%.1f", d / calls) : ""
    printf "| %s | %d | %.2f | %.0f | %s | %s |\n", n, c, us, per_core, p50, per_call
  }'
}

# tollgate through the library: decisions from compare_driver's JSON.
tollgate_row() {
  local algorithm=$1 callers=$2 mode=exact
  [ "$algorithm" = multi ] && mode=multi
  start_redis
  local before after out calls_before calls_after
  before=$(redis_cpu)
  calls_before=$(($(executed evalsha) + $(executed eval)))
  out=$("${PIN_LOAD[@]}" "$DRIVER" --via library --redis "redis://127.0.0.1:$PORT" --mode "$mode" \
    --algorithm "${algorithm/multi/token_bucket}" --callers "$callers" --keys 10000 \
    --limit 1000000000 --refill 1000000000 --duration-s "$SECONDS_PER_ROW" --warmup-s 0)
  after=$(redis_cpu)
  calls_after=$(($(executed evalsha) + $(executed eval)))
  stop_redis
  local decisions p50
  read -r decisions p50 < <(python3 -c 'import json,sys; o = json.loads(sys.argv[1])
print(o["decisions"], "%.0f" % o["p50_us"])' "$out")
  row "$algorithm" "$callers" "$decisions" "$(awk -v a="$after" -v b="$before" 'BEGIN {print a - b}')" \
    "$p50" "$((calls_after - calls_before))"
}

# redis-benchmark for `seconds` at `callers` clients, 16 deep: Redis CPU per command of `cmd`.
benchmark_cpu_per_command() {
  local callers=$1 cmd=$2
  shift 2
  local before after count_before count_after requests
  # Enough requests to run about SECONDS_PER_ROW at ~200k/s; measured by what Redis ran.
  requests=$((200000 * SECONDS_PER_ROW))
  before=$(redis_cpu)
  count_before=$(executed "$cmd")
  "${PIN_LOAD[@]}" redis-benchmark -p "$PORT" -c "$callers" -P 16 -n "$requests" -r 10000 -q "$@" \
    >/dev/null 2>&1
  after=$(redis_cpu)
  count_after=$(executed "$cmd")
  awk -v a="$after" -v b="$before" -v n=$((count_after - count_before)) \
    'BEGIN {printf "%.9f %d\n", (a - b) / (n > 0 ? n : 1), n}'
}

echo "| row | callers | Redis CPU per decision (µs) | decisions per Redis core (/s) | p50 (µs) | decisions per script call |"
echo "|---|---:|---:|---:|---:|---:|"
for callers in $CALLERS; do
  for name in $ROWS; do
    case "$name" in
      token_bucket | fixed_window | sliding_window | multi) tollgate_row "$name" "$callers" ;;
      incr)
        start_redis
        read -r cpu n < <(benchmark_cpu_per_command "$callers" incr INCR key:__rand_int__)
        stop_redis
        row "INCR (floor)" "$callers" 1000000 "$(awk -v c="$cpu" 'BEGIN {print c * 1e6}')"
        ;;
      peer)
        start_redis
        read -r incrby n1 < <(benchmark_cpu_per_command "$callers" incrby INCRBY key:__rand_int__ 1)
        read -r expire n2 < <(benchmark_cpu_per_command "$callers" expire EXPIRE key:__rand_int__ 60)
        stop_redis
        row "INCRBY + EXPIRE (envoyproxy/ratelimit)" "$callers" 1000000 \
          "$(awk -v a="$incrby" -v b="$expire" 'BEGIN {print (a + b) * 1e6}')"
        ;;
      *) echo "redis_cost: unknown row $name" >&2; exit 2 ;;
    esac
  done
done
