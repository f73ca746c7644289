#!/usr/bin/env bash
# The service benchmark: what `tollgate serve` spends per decision, beside the floor of its
# protocol measured in the same run. Every row gets a fresh server on a free loopback port
# (one redis-server is shared by the Redis rows) and two runs of one load generator: closed
# loop (the maximum: decisions per second and server CPU per decision), then paced at half
# that rate (p50 / p99 latency at half load, and CPU per decision there). Prints a Markdown
# table (and writes it to $OUT).
#
#   bench/service_bench.sh [BUILD_DIR]   (default: build; needs tollgate, bench/http_load,
#                                         bench/h2_load (or bench/grpc_load),
#                                         bench/h2_floor_server, bench/http_floor_server,
#                                         bench/grpc_floor_server)
#
# Rows (ROWS, in this order at every load level; HTTP rows at each HTTP_CONNECTIONS, gRPC
# rows at each GRPC_IN_FLIGHT):
#   nginx          HTTP floor: nginx (Debian's nginx-light), THREADS workers, access log off,
#                  keep-alive, `location / { return 200 '<a check's JSON answer>'; }`
#   http-floor-redis  HTTP + Redis floor: bench/http_floor_server --redis (epoll, THREADS
#                  loops, one pipelined EVALSHA of a token bucket's Redis calls per request
#                  before its 200; bench/floor_server.h): what a Redis round trip per request
#                  costs a hand-written server, under the http-redis row
#   http-memory    tollgate serve, POST /v1/check, in-memory store
#   http-redis     tollgate serve, POST /v1/check, Redis store
#   h2-floor       gRPC floor: bench/h2_floor_server (libnghttp2, THREADS loops, answers OK)
#   h2-floor-redis gRPC + Redis floor: bench/h2_floor_server --redis (as http-floor-redis)
#   grpc-async     gRPC C++ floor: bench/grpc_floor_server --api async --threads THREADS
#   grpc-callback  gRPC C++ floor: bench/grpc_floor_server --api callback
#   grpc-redis     tollgate serve, ShouldRateLimit, Redis store
#   (also accepted: grpc-memory, tollgate's in-memory store over gRPC; grpc-nodomain,
#   tollgate answering a domain no config defines: its gRPC cost without a decision; and
#   http-floor, bench/http_floor_server without Redis, a hand-written floor beside nginx)
# HTTP load: bench/http_load (one thread, one request in flight per keep-alive connection,
# the same POST for nginx and tollgate); gRPC load: bench/h2_load (libnghttp2, one thread,
# over CHANNELS HTTP/2 connections, as Envoy's HTTP/2 codec calls), or with GRPC_CLIENT=grpc
# bench/grpc_load (gRPC C++, CLIENT_THREADS completion-queue threads), which spends several
# times a server's CPU per call and on 2 cores sets the latency of every gRPC row itself.
#
# Environment:
#   DURATION=5 WARMUP=1         seconds measured per run, after the warm-up
#   HTTP_CONNECTIONS="8 64"     GRPC_IN_FLIGHT="4 64"
#   QUICK=0                     1 (make bench QUICK=1, the harness smoke test): the defaults
#                               become DURATION=2 WARMUP=1 HTTP_CONNECTIONS=8 GRPC_IN_FLIGHT=4
#   ROWS="nginx http-floor-redis http-memory http-redis h2-floor h2-floor-redis grpc-async
#         grpc-callback grpc-redis"
#   THREADS=2                   tollgate serve --threads, and the floors' threads (nginx
#                               workers, the nghttp2 and gRPC async floors' loops): each
#                               ratio compares servers of the same shape
#   KEYS=10000                  distinct keys (one per check)
#   STORE_TIMEOUT=""            the limits' store deadline (`timeout:`, e.g. 1s); empty:
#                               tollgate's default (10ms). On a loaded machine a Redis row at
#                               the default may be mostly fallback answers (the fallback
#                               column); a longer deadline keeps every decision on Redis.
#   CHANNELS=2                  the gRPC load generator's HTTP/2 connections
#   GRPC_CLIENT=h2              h2: bench/h2_load; grpc: bench/grpc_load with CLIENT_THREADS=2
#   LATENCY=1                   0: skip the paced runs (no latency columns)
#   PROFILE=0                   1: `perf record` the server over each closed-loop run's
#                               measured window (PROFILE_ARGS, default "-F 999": add -g for
#                               call graphs); a flat `perf report` of each row (top symbols,
#                               the kernel's share) follows the table, and the full reports
#                               are left beside $OUT (service_bench-profile-ROW-LEVEL.txt).
#                               Hardware counters are used when `perf stat -e instructions`
#                               works, cpu-clock otherwise.
#   PERF_STAT=0                 1: also context switches and syscalls per decision in the
#                               server (perf stat -p over the closed-loop measured window)
#                               (with PROFILE=1 or PERF_STAT=1, the CPU columns include
#                               perf's own overhead in the server: measure without them)
#   OUT=bench/out/service.md
#   TOLLGATE=BUILD_DIR/tollgate the tollgate binary (an A/B of two builds: run once per binary)
# Server CPU is utime + stime of the server process (/proc/PID/stat) over the measured window,
# divided by the decisions (calls for the floors) answered in it; Redis's own CPU
# (redis-server's /proc/PID/stat over the same window) is reported apart. The load
# generator runs on the same machine and is not counted. "fallback" is the share of a Redis
# row's decisions (warm-up included) that the resilience layer answered locally instead of
# Redis (tollgate's /metrics): a row with a large share measures the fallback, not Redis.
# Goals (issue 30, 29): HTTP in-memory <= 1.25x nginx, HTTP + Redis <= 1.5x nginx, gRPC + Redis
# <= 1.5x the nghttp2 floor and <= 20 us server CPU per decision at 64 in flight, p99 at half
# load <= 2 ms. A Redis row also reads as a ratio to the floor with the same Redis round trip
# ("vs floor + Redis"): what tollgate adds to what the round trip costs any server. Compare
# rows of one run (ratios), not runs: the machine is shared.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
if [ "${QUICK:-0}" = 1 ]; then
  DURATION=${DURATION:-2} WARMUP=${WARMUP:-1}
  HTTP_CONNECTIONS=${HTTP_CONNECTIONS:-8} GRPC_IN_FLIGHT=${GRPC_IN_FLIGHT:-4}
fi
DURATION=${DURATION:-5}
WARMUP=${WARMUP:-1}
HTTP_CONNECTIONS=${HTTP_CONNECTIONS:-"8 64"}
GRPC_IN_FLIGHT=${GRPC_IN_FLIGHT:-"4 64"}
ROWS=${ROWS:-"nginx http-floor-redis http-memory http-redis h2-floor h2-floor-redis grpc-async grpc-callback grpc-redis"}
THREADS=${THREADS:-2}
KEYS=${KEYS:-10000}
CHANNELS=${CHANNELS:-2}
CLIENT_THREADS=${CLIENT_THREADS:-2}
GRPC_CLIENT=${GRPC_CLIENT:-h2}
LATENCY=${LATENCY:-1}
PROFILE=${PROFILE:-0}
PROFILE_ARGS=${PROFILE_ARGS:-"-F 999"}
PERF_STAT=${PERF_STAT:-0}
STORE_TIMEOUT=${STORE_TIMEOUT:-}
OUT=${OUT:-bench/out/service.md}
export PATH="$PATH:/usr/sbin:/sbin"

TOLLGATE=${TOLLGATE:-"$BUILD/tollgate"}
HTTP_LOAD="$BUILD/bench/http_load"
case "$GRPC_CLIENT" in
  h2) GRPC_LOAD="$BUILD/bench/h2_load" GRPC_CLIENT_ARGS=() ;;
  grpc) GRPC_LOAD="$BUILD/bench/grpc_load" GRPC_CLIENT_ARGS=(--client-threads "$CLIENT_THREADS") ;;
  *) echo "service_bench: GRPC_CLIENT is h2 or grpc" >&2; exit 2 ;;
esac
H2_FLOOR="$BUILD/bench/h2_floor_server"
HTTP_FLOOR="$BUILD/bench/http_floor_server"
GRPC_FLOOR="$BUILD/bench/grpc_floor_server"

has_row() { [[ " $ROWS " == *" $1 "* ]]; }
needs=()
for row in $ROWS; do
  case "$row" in
    nginx) needs+=("$HTTP_LOAD") ;;
    http-floor | http-floor-redis) needs+=("$HTTP_FLOOR" "$HTTP_LOAD") ;;
    http-memory | http-redis) needs+=("$TOLLGATE" "$HTTP_LOAD") ;;
    h2-floor | h2-floor-redis) needs+=("$H2_FLOOR" "$GRPC_LOAD") ;;
    grpc-async | grpc-callback) needs+=("$GRPC_FLOOR" "$GRPC_LOAD") ;;
    grpc-*) needs+=("$TOLLGATE" "$GRPC_LOAD") ;;
    *) echo "service_bench: unknown row $row" >&2; exit 2 ;;
  esac
done
for binary in "${needs[@]}"; do
  [ -x "$binary" ] || { echo "service_bench: $binary not built" >&2; exit 1; }
done
if has_row nginx && ! command -v nginx >/dev/null; then
  echo "service_bench: nginx not installed (nginx-light, scripts/bootstrap): no nginx rows" >&2
  ROWS=${ROWS//nginx/}
fi
if { [ "$PROFILE" = 1 ] || [ "$PERF_STAT" = 1 ]; } && ! command -v perf >/dev/null; then
  echo "service_bench: PROFILE=1 / PERF_STAT=1 need perf (linux-perf)" >&2
  exit 1
fi
PROFILE_EVENT=cpu-clock
if [ "$PROFILE" = 1 ] && perf stat -e instructions true 2>&1 | grep -q '[0-9] *instructions'; then
  PROFILE_EVENT=cycles
fi

. bench/service_setup.sh
service_work service-bench
service_configs "$WORK" "$STORE_TIMEOUT"
REDIS_URL="" REDIS_PID=""
if [[ "$ROWS" == *redis* ]]; then service_redis; fi

# The server of the current row: its pid, the port the load goes to, tollgate's HTTP port
# (for /metrics; empty for the floors).
SERVER_PID="" CPU_PIDS="" PORT="" METRICS_PORT=""

wait_for_line() {  # $1 file, $2 sed expression printing the port; sets REPLY
  REPLY=""
  for _ in $(seq 300); do
    REPLY=$(sed -n "$2" "$1" | sed -n 1p)
    [ -n "$REPLY" ] && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "service_bench: server did not start:" >&2
  cat "$1" >&2
  exit 1
}

start_nginx() {
  local prefix="$WORK/nginx"
  PORT=$(free_port)
  service_nginx_conf "$prefix" "$PORT" "$THREADS" on
  nginx -p "$prefix/" -c "$prefix/nginx.conf" -e "$prefix/error.log" >"$prefix/stdout.log" 2>&1 &
  SERVER_PID=$!
  CPU_PIDS=$SERVER_PID
  PIDS+=("$SERVER_PID")
  METRICS_PORT=""
  for _ in $(seq 100); do
    if curl -fsS -o /dev/null "http://127.0.0.1:$PORT/" 2>/dev/null; then
      # The workers answer; the master only watches them.
      CPU_PIDS=$(pgrep -P "$SERVER_PID" | paste -sd, -)
      [ -n "$CPU_PIDS" ] && return 0
    fi
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "service_bench: nginx did not start:" >&2
  cat "$prefix/stdout.log" "$prefix/error.log" >&2
  exit 1
}

start_serve() {  # $1 store (redis | memory), $2 api (http | grpc)
  local args=(serve --config "$WORK/envoy.yaml" --config "$WORK/limits.yaml"
    --http 127.0.0.1:0 --grpc 127.0.0.1:0 --threads "$THREADS" --log-level info)
  [ "$1" = redis ] && args+=(--redis "$REDIS_URL" --instances 1)
  local log="$WORK/serve-$1-$2.log"
  : >"$log"
  "$TOLLGATE" "${args[@]}" >"$log" 2>&1 &
  SERVER_PID=$!
  CPU_PIDS=$SERVER_PID
  PIDS+=("$SERVER_PID")
  wait_for_line "$log" 's/.*listening http=127\.0\.0\.1:\([0-9]*\).*/\1/p'
  METRICS_PORT=$REPLY
  wait_for_line "$log" 's/.*listening grpc=127\.0\.0\.1:\([0-9]*\).*/\1/p'
  if [ "$2" = http ]; then PORT=$METRICS_PORT; else PORT=$REPLY; fi
}

start_floor() {  # $@: the floor server and its flags
  local log="$WORK/floor.log"
  : >"$log"
  "$@" --listen 127.0.0.1:0 >"$log" 2>&1 &
  SERVER_PID=$!
  CPU_PIDS=$SERVER_PID
  PIDS+=("$SERVER_PID")
  METRICS_PORT=""
  wait_for_line "$log" 's/^listening port=\([0-9]*\).*/\1/p'
  PORT=$REPLY
}

start_server() {  # $1 row
  case "$1" in
    nginx) start_nginx ;;
    http-memory) start_serve memory http ;;
    http-redis) start_serve redis http ;;
    grpc-memory | grpc-nodomain) start_serve memory grpc ;;
    grpc-redis) start_serve redis grpc ;;
    http-floor) start_floor "$HTTP_FLOOR" --threads "$THREADS" ;;
    http-floor-redis)
      start_floor "$HTTP_FLOOR" --threads "$THREADS" --redis "127.0.0.1:$REDIS_PORT" --keys "$KEYS" ;;
    h2-floor) start_floor "$H2_FLOOR" --threads "$THREADS" ;;
    h2-floor-redis)
      start_floor "$H2_FLOOR" --threads "$THREADS" --redis "127.0.0.1:$REDIS_PORT" --keys "$KEYS" ;;
    grpc-async) start_floor "$GRPC_FLOOR" --api async --threads "$THREADS" ;;
    grpc-callback) start_floor "$GRPC_FLOOR" --api callback ;;
  esac
}

stop_server() {
  kill -TERM "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
}

# tollgate's decisions answered by Redis and by the fallback, "REDIS FALLBACK" (/metrics);
# "0 0" without a resilience layer or a metrics port.
store_counts() {
  if [ -z "$METRICS_PORT" ]; then echo "0 0"; return; fi
  { curl -fsS "http://127.0.0.1:$METRICS_PORT/metrics" || true; } | awk '
    $1 == "tollgate_store_decisions_total" { store = $2 }
    $1 == "tollgate_store_fallback_decisions_total" { fallback = $2 }
    END { printf "%d %d", store, fallback }'
}
fallback_share() {  # $1, $2: store_counts before and after a row
  awk -v before="$1" -v after="$2" 'BEGIN {
    split(before, b, " "); split(after, a, " ")
    store = a[1] - b[1]; fallback = a[2] - b[2]
    if (store + fallback > 0) printf "%.1f%%", 100 * fallback / (store + fallback); else print "-" }'
}

# One run of the row's load generator against PORT; $1 row, $2 level, $3 rate (empty: closed
# loop). Prints the generator's `result ...` line; its full output stays in $WORK.
load() {
  local row=$1 level=$2 rate=$3 out status=0 redis_args=()
  [[ "$row" == *redis* ]] && redis_args=(--redis-pid "$REDIS_PID")
  if [[ "$row" == grpc-* || "$row" == h2-floor* ]]; then
    local domain=bench
    [ "$row" = grpc-nodomain ] && domain=no_such_domain
    out=$("$GRPC_LOAD" --target "127.0.0.1:$PORT" --domain "$domain" --key user --keys "$KEYS" \
      --concurrency "$level" --channels "$CHANNELS" "${GRPC_CLIENT_ARGS[@]}" \
      ${rate:+--rate "$rate"} --duration "$DURATION" --warmup "$WARMUP" \
      --server-pid "$CPU_PIDS" "${redis_args[@]}" 2>&1) || status=$?
  else
    out=$("$HTTP_LOAD" --target "127.0.0.1:$PORT" --connections "$level" --keys "$KEYS" \
      ${rate:+--rate "$rate"} --duration "$DURATION" --warmup "$WARMUP" \
      --server-pid "$CPU_PIDS" "${redis_args[@]}" 2>&1) || status=$?
  fi
  echo "$out" >"$WORK/load-$row-$level-${rate:-max}.txt"
  if ! grep -q '^result ' <<<"$out"; then
    echo "$out" >&2
    echo "service_bench: the load generator failed on $row at $level" >&2
    exit 1
  fi
  [ "$status" = 0 ] || echo "service_bench: $row at $level${rate:+ (rate $rate)}: errors (see below)" >&2
  grep '^result ' <<<"$out"
}
field() {  # $1 result line, $2 name
  sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<" $1"
}
micros_per() {  # $1 CPU seconds, $2 decisions per second, $3 seconds -> us per decision
  awk -v cpu="$1" -v rate="$2" -v seconds="$3" 'BEGIN {
    if (cpu < 0 || rate * seconds <= 0) print "-"; else printf "%.1f", cpu * 1e6 / (rate * seconds) }'
}

PERF_EVENTS=(context-switches syscalls:sys_enter_futex syscalls:sys_enter_epoll_wait
  syscalls:sys_enter_sendmsg syscalls:sys_enter_recvmsg syscalls:sys_enter_write
  syscalls:sys_enter_writev syscalls:sys_enter_read syscalls:sys_enter_recvfrom
  syscalls:sys_enter_sendto syscalls:sys_enter_epoll_ctl syscalls:sys_enter_timerfd_settime)
# Results by "row level".
MEASURED=()  # the keys in the order measured
declare -A DPS CPU_US REDIS_US HALF_CPU_US P50 P99 ERRORS FALLBACK PERF_CELLS PROFILE_TOP
PROFILE_DIR=$(dirname "$OUT")
mkdir -p "$PROFILE_DIR"

measure() {  # $1 row, $2 level
  local row=$1 level=$2 key="$1 $2" result perf_pid="" record_pid="" counts_before
  MEASURED+=("$key")
  start_server "$row"
  counts_before=$(store_counts)
  if [ "$PERF_STAT" = 1 ]; then
    (sleep "$WARMUP" && perf stat -x, -e "$(IFS=,; echo "${PERF_EVENTS[*]}")" -p "$CPU_PIDS" \
      -o "$WORK/stat-$row-$level.csv" -- sleep "$DURATION" >/dev/null 2>&1) &
    perf_pid=$!
  fi
  if [ "$PROFILE" = 1 ]; then
    # shellcheck disable=SC2086  # PROFILE_ARGS: several flags
    (sleep "$WARMUP" && perf record -e "$PROFILE_EVENT" $PROFILE_ARGS -p "$CPU_PIDS" \
      -o "$WORK/perf-$row-$level.data" -- sleep "$DURATION" >"$WORK/perf-$row-$level.log" 2>&1) &
    record_pid=$!
  fi
  result=$(load "$row" "$level" "")
  [ -n "$perf_pid" ] && { wait "$perf_pid" || true; }
  [ -n "$record_pid" ] && { wait "$record_pid" || true; }
  local seconds
  seconds=$(field "$result" seconds)
  DPS[$key]=$(field "$result" decisions_per_second)
  CPU_US[$key]=$(micros_per "$(field "$result" server_cpu_seconds)" "${DPS[$key]}" "$seconds")
  REDIS_US[$key]=-
  [[ "$row" == *redis* ]] &&
    REDIS_US[$key]=$(micros_per "$(field "$result" redis_cpu_seconds)" "${DPS[$key]}" "$seconds")
  ERRORS[$key]=$(field "$result" errors)
  if [ "$PERF_STAT" = 1 ]; then
    local cells="" event decisions
    decisions=$(awk -v r="${DPS[$key]}" -v s="$seconds" 'BEGIN { printf "%.0f", r * s }')
    for event in "${PERF_EVENTS[@]}"; do
      cells+=" $(awk -F, -v n="$decisions" -v e="$event" \
        '$3 == e { if (n > 0) printf "%.2f", $1 / n }' "$WORK/stat-$row-$level.csv") |"
    done
    PERF_CELLS[$key]=$cells
  fi
  if [ "$PROFILE" = 1 ] && [ -s "$WORK/perf-$row-$level.data" ]; then
    local report="$PROFILE_DIR/service_bench-profile-$row-$level.txt"
    perf report -i "$WORK/perf-$row-$level.data" --stdio --no-children --sort dso,symbol \
      >"$report" 2>>"$WORK/perf-$row-$level.log" || true
    PROFILE_TOP[$key]=$(
      echo "kernel share: $(perf report -i "$WORK/perf-$row-$level.data" --stdio --no-children \
        --sort dso 2>/dev/null | awk '$2 ~ /kernel/ { s += $1 } END { printf "%.1f%%", s }')"
      { grep '^ *[0-9.]*%' "$report" || cat "$WORK/perf-$row-$level.log"; } |
        sed 's/[ -]*$//' | cut -c1-160 | sed -n '1,12p')
  fi
  HALF_CPU_US[$key]=- P50[$key]=- P99[$key]=-
  if [ "$LATENCY" = 1 ]; then
    local half
    half=$(awk -v r="${DPS[$key]}" 'BEGIN { printf "%.0f", r / 2 }')
    if [ "$half" -gt 0 ]; then
      result=$(load "$row" "$level" "$half")
      HALF_CPU_US[$key]=$(micros_per "$(field "$result" server_cpu_seconds)" \
        "$(field "$result" decisions_per_second)" "$(field "$result" seconds)")
      P50[$key]=$(field "$result" p50_us)
      P99[$key]=$(field "$result" p99_us)
      ERRORS[$key]=$((${ERRORS[$key]} + $(field "$result" errors)))
    fi
  fi
  FALLBACK[$key]=-
  [[ "$row" == *redis* ]] &&
    FALLBACK[$key]=$(fallback_share "$counts_before" "$(store_counts)")
  stop_server
  echo "service_bench: $row at $level: ${DPS[$key]}/s, ${CPU_US[$key]} us/decision" >&2
}

HTTP_ROWS=() GRPC_ROWS=()
for row in $ROWS; do
  case "$row" in
    nginx | http-*) HTTP_ROWS+=("$row") ;;
    *) GRPC_ROWS+=("$row") ;;
  esac
done
if [ "${#HTTP_ROWS[@]}" -gt 0 ]; then
  for level in $HTTP_CONNECTIONS; do
    for row in "${HTTP_ROWS[@]}"; do measure "$row" "$level"; done
  done
fi
if [ "${#GRPC_ROWS[@]}" -gt 0 ]; then
  for level in $GRPC_IN_FLIGHT; do
    for row in "${GRPC_ROWS[@]}"; do measure "$row" "$level"; done
  done
fi

label() {
  case "$1" in
    nginx) echo "nginx \`return 200\` (HTTP floor)" ;;
    http-floor) echo "bench/http_floor_server (hand-written HTTP floor)" ;;
    http-floor-redis) echo "bench/http_floor_server + a Redis round trip (HTTP + Redis floor)" ;;
    http-memory) echo "HTTP /v1/check, in-memory" ;;
    http-redis) echo "HTTP /v1/check, Redis" ;;
    h2-floor) echo "nghttp2 floor server (gRPC floor)" ;;
    h2-floor-redis) echo "nghttp2 floor server + a Redis round trip (gRPC + Redis floor)" ;;
    grpc-async) echo "gRPC C++ async floor" ;;
    grpc-callback) echo "gRPC C++ callback floor" ;;
    grpc-redis) echo "gRPC ShouldRateLimit, Redis" ;;
    grpc-memory) echo "gRPC ShouldRateLimit, in-memory" ;;
    grpc-nodomain) echo "gRPC, unknown domain (no decision)" ;;
  esac
}
floor_of() {  # the floor row of tollgate's row $1 (empty for a floor itself)
  case "$1" in
    http-memory | http-redis) echo nginx ;;
    grpc-redis | grpc-memory | grpc-nodomain) echo h2-floor ;;
  esac
}
redis_floor_of() {  # the floor with the same Redis round trip, of tollgate's Redis row $1
  case "$1" in
    http-redis) echo http-floor-redis ;;
    grpc-redis) echo h2-floor-redis ;;
  esac
}
goal_ratio() {
  case "$1" in
    http-memory) echo 1.25 ;;
    http-redis | grpc-redis) echo 1.5 ;;
  esac
}
ratio() {  # $1 / $2 with "-" for a missing side
  awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == "" || b + 0 <= 0) print "-"; else printf "%.2f", a / b }'
}
verdict() {  # $1 row $2 level $3 ratio: the goals this row has, each met or not
  local row=$1 level=$2 ratio=$3 goals=() goal
  goal=$(goal_ratio "$row")
  if [ -n "$goal" ]; then
    if [ "$ratio" = - ]; then
      goals+=("<= ${goal}x: no floor")
    elif awk -v r="$ratio" -v g="$goal" 'BEGIN { exit !(r <= g) }'; then
      goals+=("<= ${goal}x: met")
    else
      goals+=("<= ${goal}x: **not met**")
    fi
  fi
  if [ "$row" = grpc-redis ] && [ "$level" = 64 ]; then
    if awk -v c="${CPU_US[$row $level]}" 'BEGIN { exit !(c != "-" && c <= 20) }'; then
      goals+=("<= 20 µs: met")
    else
      goals+=("<= 20 µs: **not met**")
    fi
  fi
  if [ -n "$(floor_of "$row")" ] && [ "${P99[$row $level]}" != - ]; then
    if [ "${P99[$row $level]}" -le 2000 ]; then goals+=("p99 <= 2 ms: met"); else goals+=("p99 <= 2 ms: **not met**"); fi
  fi
  if awk -v f="${FALLBACK[$row $level]}" 'BEGIN { exit !(f != "-" && f + 0 > 5) }'; then
    goals+=("fallback > 5%: measures the fallback, not Redis")
  fi
  local IFS=';'
  echo "${goals[*]:--}" | sed 's/;/; /g'
}

{
  echo "Service benchmark, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'): ${DURATION}s per run after ${WARMUP}s, tollgate serve --threads $THREADS, $KEYS keys, store deadline ${STORE_TIMEOUT:-10ms (default)}, gRPC from $(basename "$GRPC_LOAD") over $CHANNELS connections${GRPC_CLIENT_ARGS[1]:+ (${GRPC_CLIENT_ARGS[1]} client threads)}, HTTP from bench/http_load (one thread), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
  echo
  echo "| path | connections / in flight | decisions/s (max) | server CPU µs per decision | floor µs (same run) | ratio to floor | vs floor + Redis | vs gRPC C++ async | Redis CPU µs per decision | at ½ max: CPU µs | p50 µs | p99 µs | goals | fallback | errors |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  for group in HTTP GRPC; do
    if [ "$group" = HTTP ]; then levels=$HTTP_CONNECTIONS; rows=("${HTTP_ROWS[@]}"); else levels=$GRPC_IN_FLIGHT; rows=("${GRPC_ROWS[@]}"); fi
    [ "${#rows[@]}" -gt 0 ] || continue
    for level in $levels; do
      for row in "${rows[@]}"; do
        key="$row $level"
        floor=$(floor_of "$row")
        # The other floors, too, as a ratio to their protocol's floor.
        case "$row" in
          grpc-async | grpc-callback | h2-floor-redis) floor=h2-floor ;;
          http-floor | http-floor-redis) floor=nginx ;;
        esac
        floor_us=- floor_ratio=- async_ratio=- redis_floor_ratio=-
        redis_floor=$(redis_floor_of "$row")
        if [ -n "$redis_floor" ] && [ -n "${CPU_US[$redis_floor $level]:-}" ]; then
          redis_floor_ratio=$(ratio "${CPU_US[$key]}" "${CPU_US[$redis_floor $level]}")
        fi
        if [ -n "$floor" ] && [ -n "${CPU_US[$floor $level]:-}" ]; then
          floor_us=${CPU_US[$floor $level]}
          floor_ratio=$(ratio "${CPU_US[$key]}" "$floor_us")
        fi
        if [[ "$row" == grpc-redis || "$row" == grpc-memory || "$row" == grpc-nodomain ]] &&
          [ -n "${CPU_US[grpc-async $level]:-}" ]; then
          async_ratio=$(ratio "${CPU_US[$key]}" "${CPU_US[grpc-async $level]}")
        fi
        goal_text=-
        [ -n "$(floor_of "$row")" ] && goal_text=$(verdict "$row" "$level" "$floor_ratio")
        echo "| $(label "$row") | $level | ${DPS[$key]} | ${CPU_US[$key]} | $floor_us | $floor_ratio | $redis_floor_ratio | $async_ratio | ${REDIS_US[$key]} | ${HALF_CPU_US[$key]} | ${P50[$key]} | ${P99[$key]} | $goal_text | ${FALLBACK[$key]} | ${ERRORS[$key]} |"
      done
    done
  done
  if [ "$PERF_STAT" = 1 ]; then
    echo
    echo "Per decision, in the server (perf stat -p over the closed-loop measured window):"
    echo
    header="| path | level |" rule="|---|---|"
    for event in "${PERF_EVENTS[@]}"; do header+=" ${event#syscalls:sys_enter_} |"; rule+="---|"; done
    echo "$header"
    echo "$rule"
    for key in "${MEASURED[@]}"; do
      echo "| $(label "${key% *}") | ${key#* } |${PERF_CELLS[$key]}"
    done
  fi
  if [ "$PROFILE" = 1 ]; then
    echo
    echo "Profiles (perf record -e $PROFILE_EVENT $PROFILE_ARGS -p SERVER over each closed-loop window; perf report --no-children --sort dso,symbol, top 12):"
    for key in "${MEASURED[@]}"; do
      [ -n "${PROFILE_TOP[$key]:-}" ] || continue
      echo
      echo "$(label "${key% *}") at ${key#* }:"
      echo
      echo '```'
      echo "${PROFILE_TOP[$key]}"
      echo '```'
    done
  fi
} | tee "$WORK/table.md"
mkdir -p "$(dirname "$OUT")"
cp "$WORK/table.md" "$OUT"
