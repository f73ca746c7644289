#!/usr/bin/env bash
# The gRPC floor: what one unary ShouldRateLimit call costs the server in gRPC itself, by
# server API style, against `tollgate serve` answering a domain it does not know (no store,
# no descriptor work). bench/grpc_floor_server answers every call OK at once with gRPC's
# callback API (as tollgate serve), the completion-queue (async) API or the sync API; all rows
# come from one run, each against a fresh server, with one load generator (bench/grpc_load)
# on the same machine. Prints a Markdown table (and writes it to $OUT).
#
#   bench/grpc_floor.sh [BUILD_DIR]   (default: build; needs bench/grpc_floor_server,
#                                      bench/grpc_load and tollgate)
#
# Environment:
#   DURATION=5          seconds measured per row (after WARMUP=1 s)
#   CONCURRENCY="4 64"  calls in flight
#   APIS="callback async sync serve"   rows per in-flight level ("serve": tollgate serve,
#                       unknown domain)
#   ASYNC_THREADS="1 2" one async row per count of completion-queue threads
#   SYNC_THREADS=""     sync rows' --threads (MAX_POLLERS); empty: gRPC's defaults
#   EXTRA=""            further rows, one per ';'-separated set of grpc_floor_server flags,
#                       e.g. "--api callback --max-threads 2;--api async --threads 1
#                       --mutex-deadlock-detection off" (flags: bench/grpc_floor_server.cc)
#   SERVE_THREADS=2     tollgate serve --threads
#   CHANNELS=2 CLIENT_THREADS=2 KEYS=10000   grpc_load's connections, threads and keys
#   PERF_STAT=0         1: also per call, in the server, context switches and futex,
#                       epoll_wait and sendmsg calls (perf stat -p over the measured window;
#                       it counts the threads alive when it attaches, so a server that starts
#                       threads under load, as sync does, is undercounted)
#   OUT=bench/out/grpc_floor.md
# Server CPU-seconds are utime + stime of the server process over the measured window
# (grpc_load --server-pid); the load generator is not counted. On a shared machine compare
# rows of one run (ratios), not runs.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
DURATION=${DURATION:-5}
WARMUP=${WARMUP:-1}
CONCURRENCY=${CONCURRENCY:-"4 64"}
APIS=${APIS:-"callback async sync serve"}
ASYNC_THREADS=${ASYNC_THREADS:-"1 2"}
SYNC_THREADS=${SYNC_THREADS:-}
EXTRA=${EXTRA:-}
SERVE_THREADS=${SERVE_THREADS:-2}
CHANNELS=${CHANNELS:-2}
CLIENT_THREADS=${CLIENT_THREADS:-2}
KEYS=${KEYS:-10000}
PERF_STAT=${PERF_STAT:-0}
OUT=${OUT:-bench/out/grpc_floor.md}

FLOOR_SERVER="$BUILD/bench/grpc_floor_server"
GRPC_LOAD="$BUILD/bench/grpc_load"
TOLLGATE="$BUILD/tollgate"
for binary in "$FLOOR_SERVER" "$GRPC_LOAD" "$TOLLGATE"; do
  [ -x "$binary" ] || { echo "grpc_floor: $binary not built" >&2; exit 1; }
done
if [ "$PERF_STAT" = 1 ] && ! command -v perf >/dev/null; then
  echo "grpc_floor: PERF_STAT=1 needs perf (linux-perf)" >&2
  exit 1
fi
PERF_EVENTS=context-switches,syscalls:sys_enter_futex,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_sendmsg

WORK=$(mktemp -d /tmp/grpc-floor.XXXXXX)
SERVER_PID=""  # the one server running, if any (grpc_load runs in the foreground)
cleanup() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; fi
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# tollgate serve's configuration: one domain, "bench"; the calls name another.
cat >"$WORK/envoy.yaml" <<'EOF'
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000}
EOF

SERVER_PORT=""
SERVERS_STARTED=0
# Starts one server: "serve", or grpc_floor_server with the arguments given; sets SERVER_PID
# and SERVER_PORT.
start_server() {
  SERVERS_STARTED=$((SERVERS_STARTED + 1))
  local log="$WORK/server-$SERVERS_STARTED.log"
  # Created here: the server's redirection happens in the child, maybe after the first sed.
  : >"$log"
  if [ "$1" = serve ]; then
    "$TOLLGATE" serve --config "$WORK/envoy.yaml" \
      --http 127.0.0.1:0 --grpc 127.0.0.1:0 --threads "$SERVE_THREADS" --log-level info >"$log" 2>&1 &
  else
    "$FLOOR_SERVER" --listen 127.0.0.1:0 "$@" >"$log" 2>&1 &
  fi
  SERVER_PID=$!
  for _ in $(seq 300); do
    if [ "$1" = serve ]; then
      SERVER_PORT=$(sed -n 's/.*listening grpc=127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log")
    else
      SERVER_PORT=$(sed -n 's/^listening port=\([0-9]*\)$/\1/p' "$log")
    fi
    [ -n "$SERVER_PORT" ] && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "grpc_floor: server ($*) did not start:" >&2
  cat "$log" >&2
  exit 1
}
stop_server() {
  kill -TERM "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
}

ROWS=()
# One row: $1 the row's label, $2 in flight, $3 the calls' domain, then start_server's
# arguments.
run_row() {
  local label=$1 concurrency=$2 domain=$3 out result perf_pid perf_cells=""
  shift 3
  start_server "$@"
  if [ "$PERF_STAT" = 1 ]; then
    (sleep "$WARMUP" && perf stat -x, -e "$PERF_EVENTS" -p "$SERVER_PID" -o "$WORK/perf.csv" \
      -- sleep "$DURATION" >/dev/null 2>&1) &
    perf_pid=$!
  fi
  out=$("$GRPC_LOAD" --target "127.0.0.1:$SERVER_PORT" --domain "$domain" --key user --keys "$KEYS" \
    --concurrency "$concurrency" --channels "$CHANNELS" --client-threads "$CLIENT_THREADS" \
    --duration "$DURATION" --warmup "$WARMUP" --server-pid "$SERVER_PID" 2>&1) ||
    { echo "$out" >&2; echo "grpc_floor: grpc_load failed ($label)" >&2; exit 1; }
  result=$(grep '^result ' <<<"$out" | tail -n 1)
  field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<" $result"; }
  local calls cpu per_cpu
  calls=$(field calls)
  if [ "$PERF_STAT" = 1 ]; then
    wait "$perf_pid" || true
    perf_cells=$(awk -F, -v calls="$calls" '$1 ~ /^[0-9]+$/ && calls > 0 { printf " %.2f |", $1 / calls }' \
      "$WORK/perf.csv")
  fi
  stop_server
  cpu=$(field server_cpu_seconds)
  per_cpu=$(awk -v n="$calls" -v c="$cpu" 'BEGIN { if (c > 0) printf "%.0f", n / c; else print "-" }')
  ROWS+=("| $label | $concurrency | $(field calls_per_second) | $cpu | $per_cpu | $(field p50_us) | $(field p99_us) | $(field errors) |$perf_cells")
}

for concurrency in $CONCURRENCY; do
  for api in $APIS; do
    case "$api" in
      callback)
        run_row "callback (reactor finishes inline)" "$concurrency" bench --api callback
        ;;
      async)
        for threads in $ASYNC_THREADS; do
          run_row "async (completion queues), $threads thread(s)" "$concurrency" bench \
            --api async --threads "$threads"
        done
        ;;
      sync)
        if [ -n "$SYNC_THREADS" ]; then
          for threads in $SYNC_THREADS; do
            run_row "sync, MAX_POLLERS $threads" "$concurrency" bench --api sync --threads "$threads"
          done
        else
          run_row "sync (gRPC's default pollers)" "$concurrency" bench --api sync
        fi
        ;;
      serve)
        run_row "**tollgate serve**, unknown domain (callback)" "$concurrency" no_such_domain serve
        ;;
      *)
        echo "grpc_floor: unknown api $api" >&2
        exit 2
        ;;
    esac
  done
  if [ -n "$EXTRA" ]; then
    IFS=';' read -r -a extras <<<"$EXTRA"
    for extra in "${extras[@]}"; do
      read -r -a extra_args <<<"$extra"
      run_row "${extra# }" "$concurrency" bench "${extra_args[@]}"
    done
  fi
done

{
  echo "gRPC floor: ${DURATION}s per row after ${WARMUP}s warm-up, gRPC $(dpkg-query -W -f='${Version}' libgrpc++-dev 2>/dev/null || echo '?'), grpc_load over $CHANNELS connections with $CLIENT_THREADS threads, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  if [ "$PERF_STAT" = 1 ]; then
    echo "| server API | in flight | calls/s | server CPU s | calls per CPU-second | p50 µs | p99 µs | errors | context switches / call | futex / call | epoll_wait / call | sendmsg / call |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
  else
    echo "| server API | in flight | calls/s | server CPU s | calls per CPU-second | p50 µs | p99 µs | errors |"
    echo "|---|---|---|---|---|---|---|---|"
  fi
  printf '%s\n' "${ROWS[@]}"
} | tee "$WORK/table.md"
mkdir -p "$(dirname "$OUT")"
cp "$WORK/table.md" "$OUT"
