#!/usr/bin/env bash
# The Dockerfile's runtime stage, run on this machine: deploy/docker/install-runtime installs
# this build's binary into a scratch root as the image holds it (/usr/local/bin/tollgate,
# /bin/ratelimit linked to it), its package list covers every shared library the binary
# links (each ldd library's Debian package is in the list or in every Debian image), the
# Dockerfile names only files that exist, and the installed /bin/ratelimit, given
# envoyproxy/ratelimit's environment only, serves a config from its runtime directory on a
# real Redis and answers Envoy Gateway's probe (GET /healthcheck).
#
#   bash tests/docker_install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail

BUILD=$(cd "${1:?usage: docker_install_test.sh BUILD_DIR SOURCE_DIR}" && pwd)
SOURCE=$(cd "${2:?usage: docker_install_test.sh BUILD_DIR SOURCE_DIR}" && pwd)
INSTALL="$SOURCE/deploy/docker/install-runtime"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/docker_install_test.XXXXXX")
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

"$INSTALL" "$BUILD/tollgate" "$WORK/root"
[ -x "$WORK/root/usr/local/bin/tollgate" ] || fail "no executable /usr/local/bin/tollgate"
[ "$(readlink "$WORK/root/bin/ratelimit")" = "../usr/local/bin/tollgate" ] ||
  fail "/bin/ratelimit does not link to /usr/local/bin/tollgate"
"$WORK/root/bin/ratelimit" --help >"$WORK/help.txt" 2>&1 || fail "ratelimit --help: $(cat "$WORK/help.txt")"
grep -q -- "--env" "$WORK/help.txt" || fail "ratelimit --help is not serve's help"

# Every shared library the binary links comes from a package the runtime stage installs, or
# that every Debian image has. Sanitizer runtimes are this test build's only (the image is a
# Release build, which links tcmalloc instead: libgoogle-perftools4 is in the list for it).
mapfile -t packages < <("$INSTALL" --packages)
while read -r library; do
  name=$(basename "$library")
  case "$name" in libasan.so* | libubsan.so* | liblsan.so*) continue ;; esac
  owner=""
  for dir in /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu /usr/lib /lib "$(dirname "$library")"; do
    owner=$(dpkg -S "$dir/$name" 2>/dev/null | head -1 | cut -d: -f1) && [ -n "$owner" ] && break
  done
  [ -n "$owner" ] || fail "no Debian package owns $library"
  printf '%s\n' "${packages[@]}" | grep -qx "$owner" ||
    fail "$library comes from $owner, which deploy/docker/install-runtime does not install"
done < <(ldd "$WORK/root/usr/local/bin/tollgate" | awk '$3 ~ /^\// {print $3}')

# The Dockerfile copies only what exists and runs the script this test ran.
while read -r source; do
  [ -e "$SOURCE/$source" ] || fail "the Dockerfile copies $source, which does not exist"
done < <(awk '$1 == "COPY" && $2 !~ /^--/ && $2 != "." {print $2}' "$SOURCE/Dockerfile")
grep -q "install-runtime /tmp/tollgate /" "$SOURCE/Dockerfile" ||
  fail "the Dockerfile does not install with deploy/docker/install-runtime"

# The installed binary as Envoy Gateway runs it, on a real Redis.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
  >"$WORK/redis.log" 2>&1 &
pids+=($!)
mkdir -p "$WORK/data/ratelimit/config"
cat >"$WORK/data/ratelimit/config/config.yaml" <<'YAML'
domain: rl
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
YAML
http_port=$(free_port)
env -i PATH="$PATH" RUNTIME_ROOT="$WORK/data" RUNTIME_SUBDIRECTORY=ratelimit \
  REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$redis_port" HOST=127.0.0.1 PORT="$http_port" \
  GRPC_HOST=127.0.0.1 GRPC_PORT="$(free_port)" LOG_LEVEL=info \
  "$WORK/root/bin/ratelimit" >"$WORK/serve.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 300); do
  grep -qs "listening http=" "$WORK/serve.log" && break
  sleep 0.1
done
grep -q "listening http=" "$WORK/serve.log" || fail "ratelimit did not start: $(cat "$WORK/serve.log")"
[ "$(curl -s "http://127.0.0.1:$http_port/healthcheck")" = "OK" ] || fail "GET /healthcheck is not OK"
codes=""
for _ in 1 2 3; do
  codes+=$(curl -s -o /dev/null -w '%{http_code} ' -X POST "http://127.0.0.1:$http_port/json" \
    -d '{"domain":"rl","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}')
done
[ "$codes" = "200 200 429 " ] || fail "POST /json answered $codes, expected 200 200 429"
echo "PASS"
