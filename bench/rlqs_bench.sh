#!/usr/bin/env bash
# The Rate Limit Quota Service's cost: 100 Envoys x 100 buckets (bench/rlqs_load, grpc++
# streams) against one `tollgate serve` over a fresh redis-server, every bucket reported each
# second (bench/rlqs_load's Envoys report every bucket every interval, as Envoy does). Reports
# the bucket reports a second, the Redis calls a second the service makes for them (its rounds,
# --rlqs-round-ms), and the server's CPU per bucket report, for round intervals of 1 s and
# 250 ms. Writes a markdown table to $OUT (default: stdout).
#
#   bench/rlqs_bench.sh BUILD_DIR        (scripts/bench runs it; QUICK=1 shortens the runs)
set -euo pipefail
build=$(cd "${1:?usage: rlqs_bench.sh BUILD_DIR}" && pwd)
cd "$(dirname "$0")/.."
. bench/service_setup.sh
service_work rlqs-bench
service_redis
seconds=20
envoys=${RLQS_ENVOYS:-100}
buckets=${RLQS_BUCKETS:-100}
[ "${QUICK:-0}" = 1 ] && seconds=5
{
  echo "domain: bench"
  echo "descriptors:"
  echo "  - key: name"
  echo "    value: api"
  echo "    descriptors:"
  echo "      - key: user"
  echo "        rate_limit: {unit: minute, requests_per_unit: 1000000}"
} >"$WORK/rlqs.yaml"

out=${OUT:-/dev/stdout}
{
  echo "| round | Envoys x buckets | bucket reports/s | assignments/s | Redis calls/s | server CPU per report | server CPU (cores) |"
  echo "|---|---|---|---|---|---|---|"
} >"$out"
for round_ms in 1000 250; do
  log="$WORK/serve-$round_ms.log"
  "$build/tollgate" serve --config "$WORK/rlqs.yaml" --redis "$REDIS_URL" --http 127.0.0.1:0 \
    --grpc 127.0.0.1:0 --rlqs-round-ms "$round_ms" --rlqs-reporting-interval-ms 1000 \
    --grpc-max-streaming-calls-per-connection 100 >"$log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  grpc= http=
  for _ in $(seq 200); do
    grpc=$(sed -n 's/.*listening grpc=\(127\.0\.0\.1:[0-9]*\).*/\1/p' "$log")
    http=$(sed -n 's/.*listening http=\(127\.0\.0\.1:[0-9]*\).*/\1/p' "$log")
    [ -n "$grpc" ] && [ -n "$http" ] && break
    sleep 0.05
  done
  line=$("$build/bench/rlqs_load" --target "$grpc" --metrics "$http" --server-pid "$pid" \
    --envoys "$envoys" --buckets "$buckets" --interval-ms 1000 --warmup-s 3 --seconds "$seconds")
  value() { echo "$line" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
  printf '| %s ms | %s x %s | %s | %s | %s | %s us | %s |\n' "$round_ms" "$envoys" "$buckets" \
    "$(value reports_per_second)" "$(value assignments_per_second)" \
    "$(value redis_calls_per_second)" "$(value server_cpu_us_per_report)" \
    "$(value server_cpu_share)" >>"$out"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
done
