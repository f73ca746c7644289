#!/usr/bin/env bash
# Smoke test of `make bench`'s side-by-side harness (bench/compare.py --smoke): every row
# (redis-benchmark ceiling, tollgate library rows, the npm peers, tollgate serve over HTTP,
# gRPC once bench/grpc_load exists) runs a few hundred decisions against one fresh
# redis-server and must produce a number without errors, and tollgate and both peers must
# admit the same count for the same fixed-window workload (600 requests over 10 keys,
# limit 25 per key: 250 admitted).
#
#   bash tests/bench_harness_test.sh BUILD_DIR SOURCE_DIR
#
# Needs BUILD_DIR/bench/compare_driver and BUILD_DIR/tollgate, redis-server,
# redis-benchmark, python3, node and npm (the peers are installed with `npm ci --prefix
# bench/peers` from the npm registry when missing). Loopback only; bounded by 85 s.
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
for binary in bench/compare_driver tollgate; do
  if [ ! -x "$BUILD/$binary" ]; then
    echo "FAIL: $BUILD/$binary not built"
    exit 1
  fi
done

OUT=$(mktemp -d "${TMPDIR:-/tmp}/bench_harness_test.XXXXXX")
trap 'rm -rf "$OUT"' EXIT

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
