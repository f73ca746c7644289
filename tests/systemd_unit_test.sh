#!/usr/bin/env bash
# deploy/systemd/tollgate.service is a unit systemd accepts (`systemd-analyze verify`: no
# error and no warning, ExecStart pointing at this build's binary) and keeps its hardening
# (`systemd-analyze security --offline`: exposure at most 2.0, "OK"; --threshold counts in
# tenths; a unit without any hardening scores 9.6). It sets what docs/operations.md says,
# and its command line and environment start a real server on a Redis with a password.
#
#   bash tests/systemd_unit_test.sh BUILD_DIR SOURCE_DIR
#
# Exits 77 (skipped) only when systemd-analyze is missing or cannot verify even a trivial
# unit here (some containers); it does not need systemd to be running.
set -euo pipefail

BUILD=$(cd "${1:?usage: systemd_unit_test.sh BUILD_DIR SOURCE_DIR}" && pwd)
SOURCE=$(cd "${2:?usage: systemd_unit_test.sh BUILD_DIR SOURCE_DIR}" && pwd)
UNIT="$SOURCE/deploy/systemd/tollgate.service"
export PATH="$PATH:/usr/sbin:/usr/bin:/bin"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/systemd_unit_test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "SKIP: systemd-analyze not installed (Debian's systemd package)"
  exit 77
fi
printf '[Service]\nExecStart=/bin/true\n' >"$WORK/trivial.service"
if ! systemd-analyze verify "$WORK/trivial.service" >"$WORK/trivial.log" 2>&1; then
  echo "SKIP: systemd-analyze cannot verify a trivial unit here:"
  cat "$WORK/trivial.log"
  exit 77
fi

# verify checks that ExecStart's program exists: point it at this build's.
sed "s#/usr/bin/tollgate#$BUILD/tollgate#" "$UNIT" >"$WORK/tollgate.service"
if ! systemd-analyze verify "$WORK/tollgate.service" >"$WORK/verify.log" 2>&1 ||
  [ -s "$WORK/verify.log" ]; then
  echo "FAIL: systemd-analyze verify deploy/systemd/tollgate.service:"
  cat "$WORK/verify.log"
  exit 1
fi

if ! systemd-analyze security --offline=yes --threshold=20 "$WORK/tollgate.service" \
  >"$WORK/security.log" 2>&1; then
  echo "FAIL: systemd-analyze security: exposure above 2.0"
  grep -E '✗|Overall' "$WORK/security.log" || cat "$WORK/security.log"
  exit 1
fi
grep 'Overall exposure level' "$WORK/security.log"

# What the docs promise of the unit.
for line in 'DynamicUser=yes' 'ProtectSystem=strict' 'NoNewPrivileges=yes' \
  'LoadCredential=redis-password:/etc/tollgate/redis-password' \
  'ExecStart=/usr/bin/tollgate serve --redis-password-file %d/redis-password' \
  'ExecReload=/bin/kill -HUP $MAINPID' 'RestartPreventExitStatus=2'; do
  if ! grep -qxF "$line" "$UNIT"; then
    echo "FAIL: deploy/systemd/tollgate.service lacks: $line"
    exit 1
  fi
done

# The unit's ExecStart and Environment= lines, with the credential directory (%d) and
# the addresses made local, serve on a password-protected Redis: the options and variables
# parse, the password file is read, and SIGTERM stops it with exit 0.
for tool in redis-server redis-cli python3; do
  command -v "$tool" >/dev/null 2>&1 || { echo "FAIL: $tool not installed"; exit 1; }
done
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --requirepass s3cret \
  >"$WORK/redis.log" 2>&1 &
redis_pid=$!
serve_pid=""
trap 'kill $serve_pid $redis_pid 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"' EXIT
for _ in $(seq 1 50); do
  redis-cli -p "$port" -a s3cret --no-auth-warning ping >/dev/null 2>&1 && break
  sleep 0.1
done
printf 's3cret\n' >"$WORK/redis-password"
printf 'limits:\n  api: {algorithm: token_bucket, capacity: 5, refill_per_second: 1}\n' \
  >"$WORK/limits.yaml"
env_args=()
while IFS= read -r assignment; do
  env_args+=("$assignment")
done < <(sed -n 's/^Environment=\(TOLLGATE_[A-Z_]*=.*\)$/\1/p' "$UNIT")
[ "${#env_args[@]}" -ge 1 ] || { echo "FAIL: no Environment=TOLLGATE_ lines"; exit 1; }
read -r -a exec_start < <(sed -n 's/^ExecStart=//p' "$UNIT" | sed "s#%d#$WORK#g; s#/usr/bin/tollgate#$BUILD/tollgate#")
env "${env_args[@]}" TOLLGATE_CONFIG="$WORK/limits.yaml" TOLLGATE_REDIS="redis://127.0.0.1:$port" \
  TOLLGATE_HTTP=127.0.0.1:0 TOLLGATE_GRPC=127.0.0.1:0 "${exec_start[@]}" >"$WORK/serve.log" 2>&1 &
serve_pid=$!
for _ in $(seq 1 100); do
  grep -q 'listening http=' "$WORK/serve.log" && break
  kill -0 "$serve_pid" 2>/dev/null || break
  sleep 0.1
done
if ! grep -q 'listening http=' "$WORK/serve.log"; then
  echo "FAIL: the unit's command line did not serve:"
  cat "$WORK/serve.log"
  exit 1
fi
kill -TERM "$serve_pid"
set +e
wait "$serve_pid"
code=$?
set -e
serve_pid=""
if [ "$code" -ne 0 ] || grep -q s3cret "$WORK/serve.log"; then
  echo "FAIL: exit $code after SIGTERM (expected 0), or the password in the log:"
  cat "$WORK/serve.log"
  exit 1
fi
echo "ok: the unit verifies, is hardened, and its command line serves"
