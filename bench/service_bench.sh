#!/usr/bin/env bash
# The service benchmark: decisions per second and per CPU-second of the `tollgate serve`
# process, over gRPC (Envoy's rate-limit API, bench/grpc_load) and over HTTP (POST /v1/check,
# wrk), with Redis and with the in-memory store. Starts its own redis-server and servers on
# free loopback ports and stops them (a fresh server for every row); prints a Markdown table
# (and writes it to $OUT).
#
#   bench/service_bench.sh [BUILD_DIR]        (default: build; needs tollgate and bench/grpc_load)
#
# Environment:
#   DURATION=10        seconds measured per run (after WARMUP=2 s for gRPC)
#   CONCURRENCY="4 16 64" calls in flight (gRPC) / connections (wrk) per run; 4 is about
#                      the most this 2-core VM serves with p99 <= 2 ms and every decision from
#                      Redis (BENCHMARKS.md, Service)
#   THREADS=2          tollgate serve --threads
#   STORES="redis memory"  APIS="grpc http"
#   KEYS=10000         distinct keys (one descriptor / check each)
#   DESCRIPTORS="1"    descriptors per gRPC call, one row each (e.g. "1 8"; every descriptor
#                      matches a rule, so each is a decision; the headline is 1)
#   CLIENT_THREADS=2   bench/grpc_load's completion-queue threads
#   CHANNELS=2         bench/grpc_load's HTTP/2 connections (Envoy keeps one per worker thread)
#   RATE=""            gRPC calls per second (grpc_load --rate: paced, at most CONCURRENCY in
#                      flight); empty: closed loop. Two builds compare fairly at one RATE
#                      (the same calls per wake-up); closed loop favours the slower one.
#   PERF_STAT=0        1: also count, with `perf stat -p` on the server over each gRPC run's
#                      measured window, context switches and syscalls per call (a second
#                      table: where the kernel's share of a call goes)
#   FLOOR=1            1: also gRPC rows for a domain no config defines (answered OK with no
#                      status, as envoyproxy/ratelimit does, before any store or descriptor
#                      work): what a call costs the server in gRPC itself, the floor under
#                      every gRPC row
#   OUT=bench/out/service.md
# CPU-seconds are utime + stime of the tollgate process over the measured window
# (/proc/PID/stat); Redis and the load generator run on the same machine and are not counted.
# "fallback" is the share of the run's decisions (warm-up included) that the resilience layer
# answered locally instead of Redis (deadline missed, breaker open: the server's /metrics);
# a Redis row with a large share measures the fallback, not Redis.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
CONCURRENCY=${CONCURRENCY:-"4 16 64"}
THREADS=${THREADS:-2}
STORES=${STORES:-"redis memory"}
APIS=${APIS:-"grpc http"}
KEYS=${KEYS:-10000}
DESCRIPTORS=${DESCRIPTORS:-1}
CLIENT_THREADS=${CLIENT_THREADS:-2}
CHANNELS=${CHANNELS:-2}
PERF_STAT=${PERF_STAT:-0}
RATE=${RATE:-}
FLOOR=${FLOOR:-1}
OUT=${OUT:-bench/out/service.md}

TOLLGATE="$BUILD/tollgate"
GRPC_LOAD="$BUILD/bench/grpc_load"
for binary in "$TOLLGATE" "$GRPC_LOAD"; do
  [ -x "$binary" ] || { echo "service_bench: $binary not built" >&2; exit 1; }
done
if [ "$PERF_STAT" = 1 ] && ! command -v perf >/dev/null; then
  echo "service_bench: PERF_STAT=1 needs perf (linux-perf)" >&2
  exit 1
fi
if [[ " $APIS " == *" http "* ]] && ! command -v wrk >/dev/null; then
  echo "service_bench: wrk not installed (scripts/bootstrap)" >&2
  exit 1
fi

WORK=$(mktemp -d /tmp/tollgate-service-bench.XXXXXX)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Limits so large that nothing is refused: what is measured is the cost of a decision.
# grpc_load's descriptor i (from 0) has the key "user" then "user1", "user2", ...
{
  echo "domain: bench"
  echo "descriptors:"
  for i in $(seq 0 63); do
    [ "$i" = 0 ] && key=user || key="user$i"
    echo "  - key: $key"
    echo "    rate_limit: {unit: second, requests_per_unit: 1000000000}"
  done
} >"$WORK/envoy.yaml"
cat >"$WORK/limits.yaml" <<'EOF'
limits:
  bench:
    algorithm: token_bucket
    capacity: 1000000000
    refill_per_second: 1000000000
EOF
cat >"$WORK/check.lua" <<EOF
local counter = 0
request = function()
  counter = counter + 1
  local body = '{"limit":"bench","key":"u' .. (counter % $KEYS) .. '"}'
  return wrk.format("POST", "/v1/check", {["Content-Type"] = "application/json"}, body)
end
EOF

REDIS_URL=""
if [[ " $STORES " == *" redis "* ]]; then
  REDIS_PORT=$(free_port)
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" \
    --loglevel warning >"$WORK/redis.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do
    redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break
    sleep 0.1
  done
  REDIS_URL="redis://127.0.0.1:$REDIS_PORT"
fi

SERVE_PID=""
HTTP_PORT=""
GRPC_PORT=""
start_serve() {  # $1: store (redis | memory)
  local args=(serve --config "$WORK/envoy.yaml" --config "$WORK/limits.yaml"
    --http 127.0.0.1:0 --grpc 127.0.0.1:0 --threads "$THREADS" --log-level info)
  [ "$1" = redis ] && args+=(--redis "$REDIS_URL" --instances 1)
  : >"$WORK/serve-$1.log"  # exists before the server writes it: the polling below reads it
  "$TOLLGATE" "${args[@]}" >"$WORK/serve-$1.log" 2>&1 &
  SERVE_PID=$!
  PIDS+=("$SERVE_PID")
  for _ in $(seq 300); do
    HTTP_PORT=$(sed -n 's/.*listening http=127\.0\.0\.1:\([0-9]*\).*/\1/p' "$WORK/serve-$1.log")
    GRPC_PORT=$(sed -n 's/.*listening grpc=127\.0\.0\.1:\([0-9]*\).*/\1/p' "$WORK/serve-$1.log")
    [ -n "$HTTP_PORT" ] && [ -n "$GRPC_PORT" ] && return 0
    sleep 0.1
  done
  echo "service_bench: tollgate serve did not start:" >&2
  cat "$WORK/serve-$1.log" >&2
  exit 1
}
stop_serve() {
  kill -TERM "$SERVE_PID" 2>/dev/null || true
  wait "$SERVE_PID" 2>/dev/null || true
}

cpu_seconds() {  # utime + stime of PID $1 in seconds
  awk -v tck="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); print ($12 + $13) / tck }' "/proc/$1/stat"
}

to_micros() {  # wrk's "1.23ms" / "456.00us" / "1.01s" -> microseconds
  awk -v v="$1" 'BEGIN {
    if (v ~ /us$/) { sub(/us$/, "", v); printf "%.0f", v }
    else if (v ~ /ms$/) { sub(/ms$/, "", v); printf "%.0f", v * 1000 }
    else if (v ~ /s$/) { sub(/s$/, "", v); printf "%.0f", v * 1000000 }
    else printf "%s", v }'
}

# The server's decisions answered by Redis and by the fallback, "REDIS FALLBACK", from its
# /metrics; "0 0" with the in-memory store (no resilience layer) or if /metrics fails.
store_counts() {
  { curl -fsS "http://127.0.0.1:$HTTP_PORT/metrics" || true; } | awk '
    $1 == "tollgate_store_decisions_total" { store = $2 }
    $1 == "tollgate_store_fallback_decisions_total" { fallback = $2 }
    END { printf "%d %d", store, fallback }'
}
fallback_share() {  # $1, $2: store_counts before and after a run
  awk -v before="$1" -v after="$2" 'BEGIN {
    split(before, b, " "); split(after, a, " ")
    store = a[1] - b[1]; fallback = a[2] - b[2]
    if (store + fallback > 0) printf "%.1f%%", 100 * fallback / (store + fallback); else print "-" }'
}

ROWS=()
PERF_ROWS=()
# PERF_STAT: the events counted, in the order of the second table's columns (named there
# without the "syscalls:sys_enter_" prefix).
PERF_EVENTS=(context-switches syscalls:sys_enter_futex syscalls:sys_enter_epoll_wait
  syscalls:sys_enter_sendmsg syscalls:sys_enter_recvmsg syscalls:sys_enter_write
  syscalls:sys_enter_read)
# The server's count of perf event $3 per call, from perf stat's CSV ($1) and the number of
# calls ($2).
per_call() {
  awk -F, -v calls="$2" -v event="$3" '$3 == event { if (calls > 0) printf "%.2f", $1 / calls }' "$1"
}
run_grpc() {  # $1 store, $2 concurrency; GRPC_DOMAIN (default bench): the calls' domain
  local out descriptors label perf_pid perf_out counts_before
  for descriptors in $DESCRIPTORS; do
    counts_before=$(store_counts)
    perf_out="$WORK/perf-$1-$2-$descriptors.csv"
    if [ "$PERF_STAT" = 1 ]; then
      # The measured window: after the warm-up, for the duration.
      (sleep "$WARMUP" && perf stat -x, -e "$(IFS=,; echo "${PERF_EVENTS[*]}")" -p "$SERVE_PID" -o "$perf_out" \
        -- sleep "$DURATION" >/dev/null 2>&1) &
      perf_pid=$!
    fi
    out=$("$GRPC_LOAD" --target "127.0.0.1:$GRPC_PORT" --domain "${GRPC_DOMAIN:-bench}" --key user --keys "$KEYS" \
      --concurrency "$2" --channels "$CHANNELS" --client-threads "$CLIENT_THREADS" \
      --descriptors "$descriptors" ${RATE:+--rate "$RATE"} --duration "$DURATION" --warmup "$WARMUP" \
      --server-pid "$SERVE_PID" 2>&1) || { echo "$out" >&2; echo "service_bench: grpc_load failed" >&2; exit 1; }
    echo "$out" >"$WORK/grpc-$1-$2-$descriptors.txt"
    local result
    result=$(grep '^result ' <<<"$out")
    field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<" $result"; }
    label="gRPC"
    [ "$descriptors" != 1 ] && label="gRPC, **$descriptors descriptors per call**"
    [ -n "$RATE" ] && label="$label at $RATE calls/s"
    [ -n "${GRPC_DOMAIN:-}" ] && label="$label, **unknown domain: no decision, calls/s**"
    ROWS+=("| $label | $1 | $2 | $(field decisions_per_second) | $(field server_cpu_seconds) | $(field decisions_per_cpu_second) | $(field p50_us) | $(field p99_us) | $(fallback_share "$counts_before" "$(store_counts)") | $(field errors) |")
    if [ "$PERF_STAT" = 1 ]; then
      wait "$perf_pid" || true
      local calls cells=""
      calls=$(field calls)
      for event in "${PERF_EVENTS[@]}"; do
        cells+=" $(per_call "$perf_out" "$calls" "$event") |"
      done
      PERF_ROWS+=("| $label | $1 | $2 |$cells")
    fi
  done
}
run_http() {  # $1 store, $2 connections
  local before after out rps p50 p99 cpu per_cpu errors counts_before
  counts_before=$(store_counts)
  before=$(cpu_seconds "$SERVE_PID")
  out=$(wrk -t 1 -c "$2" -d "${DURATION}s" --latency -s "$WORK/check.lua" "http://127.0.0.1:$HTTP_PORT" 2>&1)
  after=$(cpu_seconds "$SERVE_PID")
  echo "$out" >"$WORK/http-$1-$2.txt"
  rps=$(awk '/^Requests\/sec:/ { printf "%.0f", $2 }' <<<"$out")
  p50=$(to_micros "$(awk '$1 == "50%" { print $2 }' <<<"$out")")
  p99=$(to_micros "$(awk '$1 == "99%" { print $2 }' <<<"$out")")
  errors=$(awk '/Non-2xx or 3xx responses:/ { print $NF }' <<<"$out")
  [ -z "$errors" ] && errors=0
  cpu=$(awk -v a="$after" -v b="$before" 'BEGIN { printf "%.2f", a - b }')
  local requests
  requests=$(awk '/requests in/ { print $1 }' <<<"$out")
  per_cpu=$(awk -v r="$requests" -v c="$cpu" 'BEGIN { if (c > 0) printf "%.0f", r / c; else print 0 }')
  ROWS+=("| HTTP /v1/check (wrk) | $1 | $2 | $rps | $cpu | $per_cpu | $p50 | $p99 | $(fallback_share "$counts_before" "$(store_counts)") | $errors |")
}

# A fresh server per row: an earlier row's load must not leave the circuit breaker open (or
# the fallback's counters full) for the next one.
for store in $STORES; do
  for concurrency in $CONCURRENCY; do
    for api in $APIS; do
      start_serve "$store"
      "run_$api" "$store" "$concurrency"
      stop_serve
    done
  done
done

# The floor: calls answered before any store work (a fresh in-memory server per row).
if [ "$FLOOR" = 1 ] && [[ " $APIS " == *" grpc "* ]]; then
  for concurrency in $CONCURRENCY; do
    start_serve memory
    GRPC_DOMAIN=no_such_domain run_grpc none "$concurrency"
    stop_serve
  done
fi

{
  echo "Service benchmark: ${DURATION}s per run, tollgate serve --threads $THREADS, $KEYS keys, gRPC over $CHANNELS connections, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  echo "| API | store | in flight | decisions/s | server CPU s | decisions per CPU-second | p50 µs | p99 µs | fallback | errors |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${ROWS[@]}"
  if [ "${#PERF_ROWS[@]}" -gt 0 ]; then
    echo
    echo "Per gRPC call, in the server (perf stat -p over the measured window):"
    echo
    header="| API | store | in flight |" rule="|---|---|---|"
    for event in "${PERF_EVENTS[@]}"; do
      header+=" ${event#syscalls:sys_enter_} |"
      rule+="---|"
    done
    echo "$header"
    echo "$rule"
    printf '%s\n' "${PERF_ROWS[@]}"
  fi
} | tee "$WORK/table.md"
mkdir -p "$(dirname "$OUT")"
cp "$WORK/table.md" "$OUT"
