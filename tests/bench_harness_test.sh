#!/usr/bin/env bash
# Smoke test of `make bench`'s side-by-side harness (bench/compare.py --smoke): every row
# (redis-benchmark ceiling, tollgate library rows, the npm peers, tollgate serve over HTTP,
# gRPC once bench/grpc_load exists) runs a few hundred decisions against one fresh
# redis-server and must produce a number without errors, and tollgate and both peers must
# admit the same count for the same fixed-window workload (600 requests over 10 keys,
# limit 25 per key: 250 admitted). Then the service benchmark's parts: the nghttp2 floor
# server (bench/h2_floor_server) answers 300 calls of the grpc++ client (bench/grpc_load) and
# 300 of the nghttp2 client (bench/h2_load) with OK, and bench/service_bench.sh in QUICK mode
# (1 s runs) gives every row a number without errors: nginx `return 200` (when nginx is
# installed), tollgate over HTTP with the in-memory store and with Redis beside the HTTP +
# Redis floor (bench/http_floor_server --redis; bench/http_load, closed loop and paced), the
# floor server and tollgate over gRPC with the in-memory store (bench/h2_load).
#
#   bash tests/bench_harness_test.sh BUILD_DIR SOURCE_DIR
#
# Needs BUILD_DIR/bench/{compare_driver,grpc_load,h2_load,http_load,h2_floor_server,
# http_floor_server} and BUILD_DIR/tollgate, redis-server, redis-benchmark, python3, node and
# npm (the peers are installed with `npm ci --prefix bench/peers` from the npm registry when missing). Loopback
# only; bounded by 85 s + 40 s + 90 s.
set -euo pipefail

BUILD=$(cd "${1:?usage: bench_harness_test.sh BUILD_DIR SOURCE_DIR}" && pwd)
SOURCE=$(cd "${2:?usage: bench_harness_test.sh BUILD_DIR SOURCE_DIR}" && pwd)
export PATH="$PATH:/usr/sbin:/usr/bin"

for tool in redis-server redis-benchmark python3 node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "FAIL: $tool not installed (make bootstrap)"
    exit 1
  fi
done
for binary in bench/compare_driver bench/grpc_load bench/h2_load bench/http_load \
  bench/h2_floor_server bench/http_floor_server tollgate; do
  if [ ! -x "$BUILD/$binary" ]; then
    echo "FAIL: $BUILD/$binary not built"
    exit 1
  fi
done

OUT=$(mktemp -d "${TMPDIR:-/tmp}/bench_harness_test.XXXXXX")
FLOOR_PID=""
cleanup() {
  [ -n "$FLOOR_PID" ] && kill "$FLOOR_PID" 2>/dev/null
  rm -rf "$OUT"
}
trap cleanup EXIT

# ASan reports leaks at exit; the drivers exit cleanly, so keep detection on.
if ! timeout 85 python3 "$SOURCE/bench/compare.py" --build "$BUILD" --out "$OUT" --smoke \
  --requests 300; then
  echo "FAIL: bench/compare.py --smoke reported failures (above)"
  exit 1
fi

# Independently of compare.py's own verdict: the rows it wrote all carry a number.
python3 - "$OUT/compare.json" <<'EOF'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
groups = {row["group"] for row in rows}
missing = {"ceiling", "library", "peer", "service"} - groups
assert not missing, f"no rows for {missing}"
for row in rows:
    if "pending" in row:
        print(f"pending: {row['name']} ({row['pending']})")
        continue
    assert "error" not in row, f"{row['name']}: {row['error']}"
    assert row["per_second"] > 0 and row["decisions"] > 0, f"{row['name']}: no number"
    assert row.get("errors", 0) == 0, f"{row['name']}: {row['errors']} errors"
print(f"PASS: {len(rows)} rows, each with a number")
EOF

# The nghttp2 floor server and the grpc++ client agree: every call answered OK.
: >"$OUT/h2_floor.log"  # before the server's shell opens it: the first read below must find it
"$BUILD/bench/h2_floor_server" --listen 127.0.0.1:0 >"$OUT/h2_floor.log" 2>&1 &
FLOOR_PID=$!
port=""
for _ in $(seq 100); do
  port=$(sed -n 's/^listening port=\([0-9]*\)$/\1/p' "$OUT/h2_floor.log")
  [ -n "$port" ] && break
  sleep 0.1
done
if [ -z "$port" ]; then
  echo "FAIL: bench/h2_floor_server did not start:"
  cat "$OUT/h2_floor.log"
  exit 1
fi
if ! calls=$(timeout 20 "$BUILD/bench/grpc_load" --target "127.0.0.1:$port" --requests 300 \
  --concurrency 8 --channels 2 --timeout 5 2>&1); then
  echo "FAIL: grpc_load against bench/h2_floor_server:"
  echo "$calls"
  exit 1
fi
if ! grep -q '^answers: ok 300, over_limit 0, errors 0$' <<<"$calls"; then
  echo "FAIL: bench/h2_floor_server did not answer 300 calls OK:"
  echo "$calls"
  exit 1
fi
if ! calls=$(timeout 20 "$BUILD/bench/h2_load" --target "127.0.0.1:$port" --requests 300 \
  --concurrency 8 --channels 2 --timeout 5 2>&1) ||
  ! grep -q '^answers: ok 300, over_limit 0, errors 0$' <<<"$calls"; then
  echo "FAIL: bench/h2_load against bench/h2_floor_server did not get 300 answers OK:"
  echo "$calls"
  exit 1
fi
kill -TERM "$FLOOR_PID"
if ! wait "$FLOOR_PID"; then
  echo "FAIL: bench/h2_floor_server did not exit 0 on SIGTERM"
  exit 1
fi
FLOOR_PID=""
echo "PASS: bench/h2_floor_server answered 300 grpc++ calls and 300 nghttp2 calls OK"

# bench/service_bench.sh, QUICK: one short row of each kind that this build has.
rows="http-memory http-floor-redis http-redis h2-floor grpc-memory"
command -v nginx >/dev/null 2>&1 && rows="nginx $rows"
if ! QUICK=1 DURATION=1 WARMUP=0.3 ROWS="$rows" OUT="$OUT/service.md" timeout 90 \
  bash "$SOURCE/bench/service_bench.sh" "$BUILD" >"$OUT/service.log" 2>&1; then
  echo "FAIL: bench/service_bench.sh (QUICK):"
  cat "$OUT/service.log"
  exit 1
fi
python3 - "$OUT/service.md" "$rows" <<'EOF'
import sys
lines = [l for l in open(sys.argv[1]) if l.startswith("| ") and not l.startswith("| path")]
names = {"nginx": "nginx", "http-memory": "HTTP /v1/check, in-memory",
         "http-floor-redis": "http_floor_server + a Redis round trip",
         "http-redis": "HTTP /v1/check, Redis", "h2-floor": "nghttp2 floor server (gRPC floor)",
         "grpc-memory": "gRPC ShouldRateLimit, in-memory"}
for row in sys.argv[2].split():
    matching = [l for l in lines if names[row] in l]
    assert matching, f"no row for {row} in:\n{''.join(lines)}"
    cells = [c.strip() for c in matching[0].strip().strip("|").split("|")]
    assert float(cells[2]) > 0, f"{row}: no decisions/s: {matching[0]}"
    assert float(cells[3]) > 0, f"{row}: no server CPU per decision: {matching[0]}"
    assert cells[11] != "-" and int(cells[11]) > 0, f"{row}: no p99 at half load: {matching[0]}"
    assert cells[-1] == "0", f"{row}: errors: {matching[0]}"
if "nginx" in sys.argv[2]:
    http = [l for l in lines if names["http-memory"] in l][0]
    cells = [c.strip() for c in http.strip().strip("|").split("|")]
    assert cells[5] != "-", f"no ratio to nginx: {http}"
http_redis = [l for l in lines if names["http-redis"] in l][0]
cells = [c.strip() for c in http_redis.strip().strip("|").split("|")]
assert float(cells[6]) > 0, f"no ratio to the HTTP + Redis floor: {http_redis}"
assert float(cells[8]) > 0, f"no Redis CPU per decision: {http_redis}"
print(f"PASS: bench/service_bench.sh QUICK: {len(lines)} rows, each with a number")
EOF
