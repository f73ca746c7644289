# shellcheck shell=bash
# The demo's rlqs scenario, sourced by demo/run (it uses demo/run's helpers and variables):
# Envoy's Rate Limit Quota Service. Simulated Envoys (tiffin-envoys, demo/envoys.cc: what
# Envoy's rate_limit_quota filter does, over gRPC) decide every request themselves, under the
# token buckets that two `tollgate serve` sharing the demo's Redis assign them from one count
# (docs/envoy.md, "Rate Limit Quota Service"). Writes OUT/rlqs.csv (per second: offered,
# allowed, what the Envoys refused themselves, tokens granted), OUT/rlqs_summary.csv
# (envoys,streams,assignments,bound,redis_calls,seconds), OUT/rlqs.png and its report section.

# The bucket {name: menu} of domain tiffin: RLQS_LIMIT requests per 1 s window, offered
# RLQS_RATE a second by RLQS_ENVOYS Envoys together.
RLQS_LIMIT=200
RLQS_RATE=800
RLQS_ENVOYS=4

rlqs_metric() {  # rlqs_metric PORT SERIES: the series' value on /metrics of 127.0.0.1:PORT, or -1.
  python3 - "$1" "$2" <<'EOF'
import sys, urllib.request
try:
    text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=2).read().decode()
except OSError:
    print(-1)
    sys.exit(0)
values = [line.split()[-1] for line in text.splitlines() if line.split(" ")[0] == sys.argv[2]]
print(values[0] if values else -1)
EOF
}

scenario_rlqs() {
  local i http=() grpc=() ports targets="" start_calls end_calls summary text max mean bound
  {
    echo "domain: tiffin"
    echo "descriptors:"
    echo "  - key: name"
    echo "    value: menu"
    echo "    rate_limit: {unit: second, requests_per_unit: $RLQS_LIMIT}"
  } >"$WORK/rlqs.yaml"
  start_redis fresh
  for i in 1 2; do
    read -r -a ports <<<"$(free_ports 2)"
    http+=("${ports[0]}")
    grpc+=("${ports[1]}")
    "$TOLLGATE" serve --config "$WORK/rlqs.yaml" --redis "redis://127.0.0.1:$REDIS_PORT" \
      --http "127.0.0.1:${ports[0]}" --grpc "127.0.0.1:${ports[1]}" --threads 1 \
      --rlqs-round-ms 250 --rlqs-reporting-interval-ms 1000 >"$WORK/serve$i.log" 2>&1 &
    # shellcheck disable=SC2034 # demo/run's table of children, which it stops
    PIDS["serve$i"]=$!
    targets+="${targets:+,}127.0.0.1:${ports[1]}"
  done
  for i in 1 2; do
    wait_port "${http[$((i - 1))]}" "serve$i"
    wait_port "${grpc[$((i - 1))]}" "serve$i"
  done
  # Each instance counts both (N, from the heartbeats) before the Envoys come.
  for i in 1 2; do
    for _ in $(seq 100); do
      [ "$(rlqs_metric "${http[$((i - 1))]}" tollgate_instances)" = 2 ] && break
      sleep 0.2
    done
  done
  start_calls=$(redis_script_calls)
  "$ENVOYS" --servers "$targets" --envoys "$RLQS_ENVOYS" --rate "$RLQS_RATE" \
    --duration-s "$RLQS_S" --bucket name=menu --domain tiffin --interval-ms 1000 \
    --summary-out "$WORK/rlqs_envoys.csv" >"$OUT/rlqs.csv"
  end_calls=$(redis_script_calls)
  {
    echo "envoys,streams,assignments,bound,redis_calls,seconds"
    echo "$(tail -n 1 "$WORK/rlqs_envoys.csv"),$((end_calls - start_calls)),$RLQS_S"
  } >"$OUT/rlqs_summary.csv"
  IFS=, read -r _ _ _ bound _ _ < <(tail -n 1 "$OUT/rlqs_summary.csv")
  max=$(awk -F, 'NR > 1 && $3 > m { m = $3 } END { print m + 0 }' "$OUT/rlqs.csv")
  mean=$(awk -F, 'NR > 2 { s += $3; n++ } END { printf "%.0f", n ? s / n : 0 }' "$OUT/rlqs.csv")
  chart rlqs "Rate Limit Quota Service: $RLQS_ENVOYS Envoys, 2 tollgate serve, limit ${RLQS_LIMIT}/s" \
    "$RLQS_LIMIT" "rlqs|the Envoys"
  summary=$(awk -v c=$((end_calls - start_calls)) -v s="$RLQS_S" 'BEGIN { printf "%.1f", c / s }')
  text="$RLQS_ENVOYS simulated Envoys (tiffin-envoys: Envoy's rate_limit_quota filter over gRPC, reporting every second), two on each of 2 \`tollgate serve\` sharing one Redis, offer ${RLQS_RATE}/s of the bucket {name: menu} for ${RLQS_S}s, against a rule of $RLQS_LIMIT per second. No request goes to tollgate: each Envoy decides locally under the token bucket its server assigns it, sized to its share of what the fleet has left (weighted by what it reports asking), and the servers count what their Envoys report in Redis in their rounds ($summary Redis script calls a second for the fleet, against ${RLQS_RATE} requests a second). Allowed per second: at most $max, $mean on average after the first second (the limit $RLQS_LIMIT; the measured bound, what the Envoys may admit in a window beyond it, is the largest grant each held, summed: $bound). The tokens column of rlqs.csv is what the servers granted that second."
  section rlqs "rlqs: Envoys deciding locally, tollgate assigning their shares (Rate Limit Quota Service)" "$text"
  stop serve1
  stop serve2
  stop redis
}
