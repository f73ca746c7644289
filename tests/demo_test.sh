#!/usr/bin/env bash
# The short Tiffin fleet demo, with the seed's claims asserted as ranges:
#   memory  per-server buckets admit at least 4x the limit (8 servers: about 8x);
#   split   limit / 8 per server under an uneven balancer refuses a user below the limit;
#   redis   a shared Redis admits the limit within 10%;
#   outage  Redis killed: the API keeps answering (allowed every second, no 5xx) while OTP
#           refuses with 503; after recovery the limits hold again.
#   partner a hot partner key (1000/s) at 2000/s: sync mode makes at most 8 servers x 10
#           syncs/s x 1.5 Redis calls a second, at least 5x fewer than exact mode, and
#           allows at most 1000 x 1.1 in every whole second.
#   skew    one partner pinned to 1 of 8 servers: the split limit and sync mode at
#           remaining / N admit about 1/8 of the limit, demand-weighted sync grants most of it
#           without passing it; in an outage, fail_open at limit / N admits about 1/8 and at
#           the shares learned while Redis was up most of the limit.
#   llm     LLM gateways: a tenant's tokens, charged after each response, stay within the
#           token bucket's budget plus the calls in flight when it ran dry; a tenant never
#           holds more than its 4 streams; a SIGKILLed gateway's leases stop counting within
#           the lease time.
#   rlqs    Envoys of the Rate Limit Quota Service (4 at 4x the limit, on 2 tollgate serve):
#           every second admits at most the limit plus the measured bound (the largest grant
#           each Envoy held, summed) and, after the first, at least half the limit on average;
#           every Envoy keeps its one stream.
#
#   bash tests/demo_test.sh BUILD_DIR SOURCE_DIR
#
# Needs tiffin-app and tiffin-load in BUILD_DIR, haproxy and redis-server installed.
# Everything runs on free 127.0.0.1 ports and is stopped by demo/run.
set -euo pipefail

BUILD=$(cd "${1:?usage: demo_test.sh BUILD_DIR SOURCE_DIR}" && pwd)
SOURCE=$(cd "${2:?usage: demo_test.sh BUILD_DIR SOURCE_DIR}" && pwd)
export PATH="$PATH:/usr/sbin:/usr/bin"

for tool in haproxy redis-server python3; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "FAIL: $tool not installed (make bootstrap)"
    exit 1
  fi
done
for binary in tiffin-app tiffin-load tiffin-envoys tollgate; do
  if [ ! -x "$BUILD/$binary" ]; then
    echo "FAIL: $BUILD/$binary not built"
    exit 1
  fi
done

OUT=$(mktemp -d "${TMPDIR:-/tmp}/demo_test.XXXXXX")
trap 'rm -rf "$OUT"' EXIT

started=$(date +%s)
if ! timeout 270 "$SOURCE/demo/run" --short --build "$BUILD" --out "$OUT"; then
  echo "FAIL: demo/run --short did not finish"
  exit 1
fi
elapsed=$(($(date +%s) - started))

# The limit the scenarios exercise: api_per_user of examples/tiffin.yaml.
CAPACITY=10
RATE=5

failures=0
check() {  # check DESCRIPTION COMMAND...: one claim; PASS or FAIL.
  local description=$1
  shift
  if "$@"; then
    echo "PASS: $description"
  else
    echo "FAIL: $description"
    failures=$((failures + 1))
  fi
}

# sum CSV COLUMN [FIRST_SECOND [LAST_SECOND]]: the column summed over those seconds.
sum() {
  awk -F, -v n="$2" -v a="${3:-0}" -v b="${4:-1000000}" \
    'NR > 1 && $1 >= a && $1 <= b { s += $n } END { print s + 0 }' "$1"
}
seconds() { awk 'END { print NR - 1 }' "$1"; }
# every CSV FIRST LAST CONDITION: CONDITION (awk, on $2 offered, $3 allowed, $4 refused,
# $5 unavailable, $6 errors) holds in every second from FIRST to LAST, and there is one.
every() {
  awk -F, -v a="$2" -v b="$3" "NR > 1 && \$1 >= a && \$1 <= b { seen++; if (!($4)) bad++ }
    END { exit !(seen > 0 && bad == 0) }" "$1"
}
between() { awk -v x="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(x >= lo && x <= hi) }'; }

# memory: a fleet of 8 full buckets.
memory_seconds=$(seconds "$OUT/memory.csv")
memory_budget=$((CAPACITY + RATE * memory_seconds))
memory_allowed=$(sum "$OUT/memory.csv" 3)
check "memory: fleet allowed $memory_allowed, >= 4 x the limit's $memory_budget" \
  test "$memory_allowed" -ge $((4 * memory_budget))

# split: refusals although the user stays under the limit.
split_offered=$(sum "$OUT/split.csv" 2)
split_refused=$(sum "$OUT/split.csv" 4)
split_seconds=$(seconds "$OUT/split.csv")
check "split: offered $split_offered in ${split_seconds}s (under ${RATE}/s) yet $split_refused refused" \
  test "$split_refused" -gt 0 -a "$split_offered" -lt $((RATE * split_seconds))

# redis: exact.
redis_seconds=$(seconds "$OUT/redis.csv")
redis_budget=$((CAPACITY + RATE * redis_seconds))
redis_allowed=$(sum "$OUT/redis.csv" 3)
check "redis: fleet allowed $redis_allowed, within 10% of the limit's $redis_budget" \
  between "$redis_allowed" "$(awk -v b="$redis_budget" 'BEGIN { print b * 0.9 }')" \
  "$(awk -v b="$redis_budget" 'BEGIN { print b * 1.1 }')"

# outage: whole seconds inside [kill + 0.5 s, restart), and from restart + 2 s to the end.
IFS=, read -r kill_s restart_s < <(tail -n 1 "$OUT/outage_window.csv")
down_first=$(awk -v k="$kill_s" 'BEGIN { s = k + 0.5; print (s == int(s)) ? s : int(s) + 1 }')
down_last=$(awk -v r="$restart_s" 'BEGIN { print int(r) - 1 }')
up_first=$(awk -v r="$restart_s" 'BEGIN { print int(r) + 2 }')
api=$OUT/outage_api.csv
otp=$OUT/outage_otp.csv
up_last=$(($(seconds "$api") - 1))
echo "outage: Redis down ${kill_s}s..${restart_s}s; outage seconds $down_first..$down_last," \
  "recovered seconds $up_first..$up_last"
check "outage: API allowed every outage second ($(sum "$api" 3 "$down_first" "$down_last") in all)" \
  every "$api" "$down_first" "$down_last" '$3 > 0'
check "outage: API answered every request 200 or 429 (no 503, no errors)" \
  test "$(($(sum "$api" 5) + $(sum "$api" 6)))" -eq 0
check "outage: OTP refused with 503 every outage second, allowed none" \
  every "$otp" "$down_first" "$down_last" '$5 > 0 && $3 == 0'
check "outage: OTP answered by Redis again after recovery (429s, no 503)" \
  test "$(sum "$otp" 4 "$up_first" "$up_last")" -gt 0 -a \
  "$(sum "$otp" 5 "$up_first" "$up_last")" -eq 0
# 3 per 10 minutes, windows aligned to the epoch: at most 3 more if a window turns meanwhile.
check "outage: OTP allowed $(sum "$otp" 3) in the whole run (limit 3, kept across the restart)" \
  test "$(sum "$otp" 3 "$up_first" "$up_last")" -le 3 -a "$(sum "$otp" 3)" -le 6
api_up=$(sum "$api" 3 "$up_first" "$up_last")
api_up_max=$(awk -v n=$((up_last - up_first + 1)) -v r="$RATE" -v c="$CAPACITY" \
  'BEGIN { printf "%d", 1.1 * r * n + c }')
check "outage: API after recovery allowed $api_up, within the limit ($api_up_max)" \
  test "$api_up" -le "$api_up_max"
# No dip after recovery: the user offering 4x the rate gets the limit's rate again (what the
# shares admitted during the outage is charged as of when it was admitted, docs/resilience.md).
api_up_min=$(awk -v n=$((up_last - up_first + 1)) -v r="$RATE" 'BEGIN { printf "%d", 0.6 * r * n }')
check "outage: API after recovery allowed $api_up, at least 60% of the limit's rate ($api_up_min)" \
  test "$api_up" -ge "$api_up_min"

# partner: OUT/partner_redis.csv has one row per mode (exact, sync):
#   mode,seconds,redis_calls,redis_calls_per_s,offered,allowed,over_limit,overshoot_pct
PARTNER_LIMIT=1000
partner_field() {  # partner_field MODE COLUMN
  awk -F, -v m="$1" -v n="$2" '$1 == m { print $n }' "$OUT/partner_redis.csv"
}
exact_calls=$(partner_field exact 4)
sync_calls=$(partner_field sync 4)
echo "partner: Redis script calls/s exact $exact_calls, sync $sync_calls;" \
  "overshoot exact $(partner_field exact 8)%, sync $(partner_field sync 8)% of offered"
check "partner: sync mode made $sync_calls Redis calls/s, <= 8 servers / 0.1 s x 1.5 = 120" \
  awk -v x="$sync_calls" 'BEGIN { exit !(x > 0 && x <= 120) }'
check "partner: sync mode's $sync_calls calls/s at least 5x fewer than exact mode's $exact_calls" \
  awk -v s="$sync_calls" -v e="$exact_calls" 'BEGIN { exit !(s * 5 <= e) }'
# The load generator's seconds start on whole seconds, as the limit's windows do; every
# second but the last is whole.
sync_last=$(($(seconds "$OUT/partner_sync.csv") - 1))
check "partner: sync mode allowed <= $PARTNER_LIMIT x 1.1 in every whole second (max $(
  awk -F, 'NR > 1 && $3 > m { m = $3 } END { print m + 0 }' "$OUT/partner_sync.csv"))" \
  every "$OUT/partner_sync.csv" 0 "$sync_last" "\$3 <= $PARTNER_LIMIT * 1.1"

# skew: OUT/skew.csv has name,case,traffic,share_pct (of partner_hot_key's 1000 per window, or of
# what was offered in a window where the load generator offered less).
skew_pct() { awk -F, -v n="$1" '$1 == n { print $4 }' "$OUT/skew.csv"; }
check "skew: pinned, the split limit admitted $(skew_pct skew_split_pinned)%, at most 20%" \
  test "$(skew_pct skew_split_pinned)" -le 20
check "skew: pinned, sync at remaining / N admitted $(skew_pct skew_equal_pinned)%, at most 30%" \
  test "$(skew_pct skew_equal_pinned)" -le 30
check "skew: pinned, sync by demand admitted $(skew_pct skew_demand_pinned)%, at least 70% and twice remaining / N" \
  test "$(skew_pct skew_demand_pinned)" -ge 70 -a \
  "$(skew_pct skew_demand_pinned)" -ge $((2 * $(skew_pct skew_equal_pinned)))
for run in skew_demand_pinned skew_demand_half; do
  check "skew: $run allowed <= $PARTNER_LIMIT x 1.1 in every whole window" \
    every "$OUT/$run.csv" 0 $(($(seconds "$OUT/$run.csv") - 2)) "\$3 <= $PARTNER_LIMIT * 1.1"
done
check "skew: outage, fail_open at limit / N admitted $(skew_pct skew_out_equal)%, at most 20%" \
  test "$(skew_pct skew_out_equal)" -le 20
check "skew: outage, fail_open at learned shares admitted $(skew_pct skew_out_demand)%, 70% to 110%" \
  test "$(skew_pct skew_out_demand)" -ge 70 -a "$(skew_pct skew_out_demand)" -le 110

# llm: the menu assistant's limits (examples/tiffin.yaml) behind 4 gateways.
TOKENS_PER_S=1000
TOKENS_BURST=3000
MAX_TOKENS=1300  # the most one acme response charges (demo/run: tokens=300-1300)
STREAMS=4
LEASE_S=3
acme_tokens=$(sum "$OUT/llm_acme.csv" 7)
acme_budget=$((TOKENS_BURST + TOKENS_PER_S * $(seconds "$OUT/llm_acme.csv")))
check "llm: acme charged $acme_tokens tokens, within half its budget $acme_budget and the budget + $STREAMS calls in flight" \
  awk -v x="$acme_tokens" -v b="$acme_budget" -v m=$((STREAMS * MAX_TOKENS)) \
  'BEGIN { exit !(x >= b / 2 && x <= b + m) }'
initech_max=$(awk -F, 'NR > 1 && $2 > m { m = $2 } END { print m + 0 }' "$OUT/llm_leases.csv")
check "llm: initech's leases in Redis peaked at $initech_max, at most $STREAMS" \
  test "$initech_max" -ge 1 -a "$initech_max" -le "$STREAMS"
IFS=, read -r llm_kill_s llm_victim llm_held < <(tail -n 1 "$OUT/llm_kill.csv")
llm_back_s=$(awk -F, -v k="$llm_kill_s" 'NR > 1 && $1 > k && $4 == 0 { print $1; exit }' \
  "$OUT/llm_leases.csv")
check "llm: $llm_victim held $llm_held of initech's leases when SIGKILLed at ${llm_kill_s}s; Redis counted none of them from ${llm_back_s:-never}s, within the lease time ($LEASE_S s) + 1 s of sampling" \
  awk -v k="$llm_kill_s" -v b="${llm_back_s:-1e9}" -v h="$llm_held" -v l="$LEASE_S" \
  'BEGIN { exit !(h >= 1 && b > k && b <= k + l + 1) }'

# rlqs: OUT/rlqs.csv per second (the limit's 1 s windows); OUT/rlqs_summary.csv one row of
#   envoys,streams,assignments,bound,redis_calls,seconds
RLQS_LIMIT=200
IFS=, read -r rlqs_envoys rlqs_streams rlqs_assignments rlqs_bound rlqs_calls rlqs_seconds \
  < <(tail -n 1 "$OUT/rlqs_summary.csv")
rlqs_max=$(awk -F, 'NR > 1 && $3 > m { m = $3 } END { print m + 0 }' "$OUT/rlqs.csv")
rlqs_last=$(($(seconds "$OUT/rlqs.csv") - 1))
echo "rlqs: $rlqs_envoys Envoys, $rlqs_assignments assignments, $rlqs_calls Redis script calls" \
  "in ${rlqs_seconds}s; allowed per second at most $rlqs_max; bound $rlqs_bound"
check "rlqs: every second allowed <= the limit $RLQS_LIMIT + the measured bound $rlqs_bound (max $rlqs_max)" \
  every "$OUT/rlqs.csv" 0 "$rlqs_last" "\$3 <= $RLQS_LIMIT + $rlqs_bound"
rlqs_used=$(sum "$OUT/rlqs.csv" 3 1 "$rlqs_last")
check "rlqs: allowed $rlqs_used after the first second, at least half the limit's $((RLQS_LIMIT * rlqs_last))" \
  test "$rlqs_used" -ge $((RLQS_LIMIT * rlqs_last / 2))
check "rlqs: $rlqs_streams streams for $rlqs_envoys Envoys (none ended), $rlqs_assignments assignments" \
  test "$rlqs_streams" -eq "$rlqs_envoys" -a "$rlqs_assignments" -gt 0

echo
if [ "$failures" -eq 0 ]; then
  echo "demo_test: PASS (demo/run --short took ${elapsed}s)"
else
  echo "demo_test: FAIL ($failures claim(s) not shown; demo/run --short took ${elapsed}s)"
  exit 1
fi
