# Copyright tollgate authors. What bench/service_bench.sh and bench/service_cost.sh both set
# up: a work directory cleaned at exit with every server started, the configs that refuse
# nothing, a redis-server, and nginx's `return 200` floor. Sourced (bash), not run.
#
#   . bench/service_setup.sh
#   service_work service-bench          # WORK, PIDS, an EXIT trap
#   service_configs "$WORK" 1s          # envoy.yaml, limits.yaml; store deadline ("" = default)
#   service_redis                       # REDIS_PORT, REDIS_PID, REDIS_URL
#   service_nginx_conf DIR PORT WORKERS MASTER   # DIR/nginx.conf; MASTER on|off
# shellcheck shell=bash disable=SC2034  # sets variables for the script that sources it

# A fresh directory /tmp/tollgate-NAME.XXXXXX as WORK; PIDS, killed at exit before WORK is
# removed.
service_work() {
  WORK=$(mktemp -d "/tmp/tollgate-$1.XXXXXX")
  PIDS=()
  trap service_cleanup EXIT
}

service_cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Limits so large that nothing is refused: what is measured is the cost of a decision. The
# gRPC load generators' descriptor i (from 0) has the key "user" then "user1", "user2", ...
# $1 the directory, $2 the store deadline of every limit ("" for the default).
service_configs() {
  local dir=$1 timeout=${2:-}
  {
    echo "domain: bench"
    echo "descriptors:"
    echo "  - key: user"
    echo "    rate_limit: {unit: second, requests_per_unit: 1000000000${timeout:+, timeout: $timeout}}"
  } >"$dir/envoy.yaml"
  {
    echo "limits:"
    echo "  bench:"
    echo "    algorithm: token_bucket"
    echo "    capacity: 1000000000"
    echo "    refill_per_second: 1000000000"
    if [ -n "$timeout" ]; then echo "    timeout: $timeout"; fi
  } >"$dir/limits.yaml"
}

# A redis-server on a free loopback port, in WORK, answering PING before this returns.
service_redis() {
  REDIS_PORT=$(free_port)
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" \
    --loglevel warning >"$WORK/redis.log" 2>&1 &
  REDIS_PID=$!
  PIDS+=("$REDIS_PID")
  for _ in $(seq 100); do
    redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break
    sleep 0.1
  done
  REDIS_URL="redis://127.0.0.1:$REDIS_PORT"
}

# nginx answering every request with one allowed check's JSON, as tollgate's POST /v1/check
# renders it: $1 its prefix directory (the config goes to $1/nginx.conf), $2 the port,
# $3 worker processes, $4 master_process (on, or off: one process, for callgrind).
service_nginx_conf() {
  local prefix=$1 port=$2 workers=$3 master=$4
  mkdir -p "$prefix"
  cat >"$prefix/nginx.conf" <<EOF
daemon off;
master_process $master;
worker_processes $workers;
pid $prefix/nginx.pid;
error_log $prefix/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  keepalive_requests 100000000;
  keepalive_timeout 60s;
  client_body_temp_path $prefix/body;
  proxy_temp_path $prefix/proxy;
  fastcgi_temp_path $prefix/fastcgi;
  uwsgi_temp_path $prefix/uwsgi;
  scgi_temp_path $prefix/scgi;
  default_type application/json;
  server {
    listen 127.0.0.1:$port;
    location / {
      return 200 '{"allowed":true,"limit":1000000000,"remaining":999999999,"reset_after_ms":0,"retry_after_ms":0}';
    }
  }
}
EOF
}
