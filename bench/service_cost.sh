#!/usr/bin/env bash
# What `tollgate serve` and the floors of bench/service_bench.sh execute per decision in user
# space, counted by callgrind: instructions, which do not move with a shared machine's noise
# as CPU time does (the kernel's part, system calls and wake-ups, is not counted; see
# service_bench.sh's PERF_STAT=1 for those). Each row runs its server under
# `valgrind --tool=callgrind` with one event loop, sends 3,000 requests of warm-up, zeroes the
# counters, sends CALLS requests and divides the instructions counted by CALLS. Under callgrind
# a server runs tens of times slower, so more requests share each read than at full speed:
# compare rows of one run, not a row with service_bench.sh's CPU time.
#
#   bench/service_cost.sh [BUILD_DIR]   (default: build; needs valgrind, redis-server,
#                                        nginx for the nginx row, tollgate,
#                                        bench/{h2_load,http_load,h2_floor_server,
#                                        http_floor_server})
#
# Environment:
#   CALLS=20000     requests measured per row
#   ROWS="h2-floor h2-floor-redis grpc-memory grpc-redis nginx http-floor http-floor-redis
#         http-memory http-redis"
#                   the rows of service_bench.sh (nginx, h2-floor*, http-floor*: the floors;
#                   grpc-*: ShouldRateLimit, 64 in flight on one HTTP/2 connection; nginx,
#                   http-*: POST /v1/check on 8 keep-alive connections), on 1,000 keys
#   OUT=bench/out/service_cost.md
#   TOLLGATE=BUILD_DIR/tollgate  the server binary measured (another build's, to compare)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
CALLS=${CALLS:-20000}
ROWS=${ROWS:-"h2-floor h2-floor-redis grpc-memory grpc-redis nginx http-floor http-floor-redis http-memory http-redis"}
OUT=${OUT:-bench/out/service_cost.md}
WARMUP_CALLS=3000
TOLLGATE=${TOLLGATE:-"$BUILD/tollgate"}
for binary in "$TOLLGATE" "$BUILD"/bench/{h2_load,http_load,h2_floor_server,http_floor_server}; do
  [ -x "$binary" ] || { echo "service_cost: $binary not built" >&2; exit 1; }
done
for tool in valgrind callgrind_control callgrind_annotate redis-server; do
  command -v "$tool" >/dev/null || { echo "service_cost: $tool not installed" >&2; exit 1; }
done
export PATH="$PATH:/usr/sbin:/sbin"
if [[ " $ROWS " == *" nginx "* ]] && ! command -v nginx >/dev/null; then
  echo "service_cost: nginx not installed (nginx-light, scripts/bootstrap): no nginx row" >&2
  ROWS=${ROWS//nginx/}
fi

. bench/service_setup.sh
service_work service-cost
# A deadline no callgrind run reaches.
service_configs "$WORK" 10s
service_redis

# Prints the row's instructions per decision.
measure() {
  local row=$1 args=() pattern log="$WORK/$1.log" out="$WORK/callgrind.$1" nginx_port=""
  case "$row" in
    nginx)
      # One process (no master), so that callgrind follows the worker that answers.
      nginx_port=$(free_port)
      service_nginx_conf "$WORK/nginx" "$nginx_port" 1 off
      args=(nginx -p "$WORK/nginx/" -c "$WORK/nginx/nginx.conf" -e "$WORK/nginx/error.log")
      pattern="" ;;
    h2-floor | http-floor | h2-floor-redis | http-floor-redis)
      local floor=h2_floor_server
      [[ "$row" == http-* ]] && floor=http_floor_server
      args=("$BUILD/bench/$floor" --threads 1 --listen 127.0.0.1:0)
      [[ "$row" == *-redis ]] && args+=(--redis "127.0.0.1:$REDIS_PORT" --keys 1000)
      pattern='s/^listening port=\([0-9]*\).*/\1/p' ;;
    *)
      args=("$TOLLGATE" serve --config "$WORK/envoy.yaml" --config "$WORK/limits.yaml"
        --http 127.0.0.1:0 --grpc 127.0.0.1:0 --threads 1 --log-level info)
      [[ "$row" == *-redis ]] && args+=(--redis "redis://127.0.0.1:$REDIS_PORT" --instances 1)
      if [[ "$row" == grpc-* ]]; then
        pattern='s/.*listening grpc=127\.0\.0\.1:\([0-9]*\).*/\1/p'
      else
        pattern='s/.*listening http=127\.0\.0\.1:\([0-9]*\).*/\1/p'
      fi ;;
  esac
  valgrind --tool=callgrind --callgrind-out-file="$out" "${args[@]}" >"$log" 2>&1 &
  local pid=$! port=""
  # (This runs in a command substitution: the EXIT trap does not see this pid.)
  fail() { echo "service_cost: $row: $1" >&2; cat "$2" >&2; kill "$pid" 2>/dev/null; exit 1; }
  for _ in $(seq 300); do
    if [ -n "$pattern" ]; then
      port=$(sed -n "$pattern" "$log" | sed -n 1p)
    elif curl -fsS -o /dev/null "http://127.0.0.1:$nginx_port/" 2>/dev/null; then
      port=$nginx_port  # nginx says nothing when it listens: it answers
    fi
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  [ -n "$port" ] || fail "did not start" "$log"
  load() {  # $1 requests
    if [[ "$row" == h2-* || "$row" == grpc-* ]]; then
      "$BUILD/bench/h2_load" --target "127.0.0.1:$port" --domain bench --key user --keys 1000 \
        --concurrency 64 --channels 1 --requests "$1" --timeout 120
    else
      "$BUILD/bench/http_load" --target "127.0.0.1:$port" --keys 1000 --connections 8 \
        --requests "$1" --timeout 120
    fi
  }
  load "$WARMUP_CALLS" >"$WORK/$row-warmup.txt" 2>&1 || fail "warm-up failed" "$WORK/$row-warmup.txt"
  callgrind_control -z "$pid" >/dev/null 2>&1
  load "$CALLS" >"$WORK/$row-load.txt" 2>&1 || fail "load failed" "$WORK/$row-load.txt"
  callgrind_control -d "$pid" >/dev/null 2>&1
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  # The dump after zeroing is the measured part (callgrind numbers it .1 or later).
  local dump
  dump=$(find "$(dirname "$out")" -name "$(basename "$out").*" | sort -V | tail -1)
  callgrind_annotate "$dump" 2>/dev/null | awk -v calls="$CALLS" \
    '/PROGRAM TOTALS/ { gsub(",", "", $1); printf "%.0f", $1 / calls }'
}

label() {
  case "$1" in
    h2-floor) echo "nghttp2 floor server" ;;
    h2-floor-redis) echo "nghttp2 floor server + a Redis round trip" ;;
    grpc-memory) echo "gRPC ShouldRateLimit, in-memory" ;;
    grpc-redis) echo "gRPC ShouldRateLimit, Redis" ;;
    nginx) echo "nginx \`return 200\` (one process)" ;;
    http-floor) echo "bench/http_floor_server" ;;
    http-floor-redis) echo "bench/http_floor_server + a Redis round trip" ;;
    http-memory) echo "HTTP /v1/check, in-memory" ;;
    http-redis) echo "HTTP /v1/check, Redis" ;;
    *) echo "service_cost: unknown row $1" >&2; exit 2 ;;
  esac
}

{
  echo "Service cost, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'): user-space instructions per decision under callgrind, one loop, $CALLS requests after $WARMUP_CALLS"
  echo
  echo "| path | instructions per decision |"
  echo "|---|---|"
  for row in $ROWS; do
    name=$(label "$row")
    echo "| $name | $(measure "$row") |"
  done
} | tee "$WORK/table.md"
mkdir -p "$(dirname "$OUT")"
cp "$WORK/table.md" "$OUT"
