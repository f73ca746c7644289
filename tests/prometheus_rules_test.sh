#!/usr/bin/env bash
# deploy/prometheus/tollgate-alerts.yml is a valid rules file whose alerts fire as its unit
# tests say (promtool check rules, promtool test rules), and every tollgate_* metric it or
# its tests name is one that a real `tollgate serve` emits on GET /metrics: a server with
# the in-memory store and one with --redis (each has families the other has not).
#
#   bash tests/prometheus_rules_test.sh BUILD_DIR SOURCE_DIR
#
# Needs promtool (Debian's prometheus package: scripts/bootstrap), redis-server, curl.
set -euo pipefail

BUILD=$(cd "${1:?usage: prometheus_rules_test.sh BUILD_DIR SOURCE_DIR}" && pwd)
SOURCE=$(cd "${2:?usage: prometheus_rules_test.sh BUILD_DIR SOURCE_DIR}" && pwd)
RULES="$SOURCE/deploy/prometheus/tollgate-alerts.yml"
RULE_TESTS="$SOURCE/deploy/prometheus/tollgate-alerts.test.yml"
export PATH="$PATH:/usr/sbin:/usr/bin"

for tool in promtool redis-server curl python3; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "FAIL: $tool not installed (scripts/bootstrap installs it)"
    exit 1
  fi
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/prometheus_rules_test.XXXXXX")
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

promtool check rules "$RULES"
(cd "$(dirname "$RULE_TESTS")" && promtool test rules "$(basename "$RULE_TESTS")")

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Starts `tollgate serve` with the given extra arguments; sets serve_port to its HTTP port.
# (Not in a $(...) subshell: the server's pid must reach `pids` for the cleanup.)
serve_port=""
start_serve() {
  local log="$WORK/serve.${#pids[@]}.log"
  : >"$log"  # before the server's shell opens it: the first read below must find it
  "$BUILD/tollgate" serve --config "$SOURCE/examples/tiffin.yaml" --http 127.0.0.1:0 \
    --grpc 127.0.0.1:0 "$@" >"$log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do
    local port
    port=$(sed -n 's/.*listening http=127.0.0.1:\([0-9]*\).*/\1/p' "$log")
    if [ -n "$port" ]; then
      serve_port=$port
      return
    fi
    sleep 0.1
  done
  echo "FAIL: tollgate serve $* did not start:" >&2
  cat "$log" >&2
  exit 1
}

# The families of one scrape ("# TYPE name type" lines), one "name type" a line.
families() {
  curl -sf "http://127.0.0.1:$1/metrics" | sed -n 's/^# TYPE \([a-zA-Z_:][a-zA-Z0-9_:]*\) \([a-z]*\)$/\1 \2/p'
}

start_serve
families "$serve_port" >"$WORK/families"

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
  >"$WORK/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 50); do
  redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
  sleep 0.1
done
start_serve --redis "redis://127.0.0.1:$redis_port"
families "$serve_port" >>"$WORK/families"

grep -q '^tollgate_store_round_trip_seconds histogram$' "$WORK/families" || {
  echo "FAIL: the --redis server's /metrics has no tollgate_store_round_trip_seconds"
  exit 1
}
grep -q '^tollgate_memory_store_keys gauge$' "$WORK/families" || {
  echo "FAIL: the in-memory server's /metrics has no tollgate_memory_store_keys"
  exit 1
}

# Every tollgate_* name in the rules and their tests: a family, or a histogram's
# _bucket/_sum/_count series.
missing=0
names=$(cat "$RULES" "$RULE_TESTS" | grep -v '^ *#' | grep -o 'tollgate_[a-z_]*[a-z]' | sort -u)
[ -n "$names" ] || { echo "FAIL: no metric names found in $RULES"; exit 1; }
for name in $names; do
  if grep -q "^$name " "$WORK/families"; then continue; fi
  base=$(echo "$name" | sed -E 's/_(bucket|sum|count)$//')
  if [ "$base" != "$name" ] && grep -q "^$base histogram$" "$WORK/families"; then continue; fi
  echo "FAIL: $name is not a metric tollgate serve emits (src/server/metrics.cc)"
  missing=1
done
[ "$missing" -eq 0 ]
echo "ok: rules valid, unit tests pass, every metric name is emitted"
