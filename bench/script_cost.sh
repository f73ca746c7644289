#!/usr/bin/env bash
# What one decision costs Redis itself: user-space instructions that redis-server executes per
# decision, counted by valgrind's callgrind (deterministic, so unlike decisions per second it
# does not move with the machine's load), and the script calls it takes. The seed's token
# bucket script (sent by redis-benchmark, as the ceiling of bench/compare.py) next to
# tollgate's check.lua for each algorithm and for three limits in one request (sent by
# bench/compare_driver through the library: at 64 callers a flush's requests share a script
# call; at 1 caller each request is a call of its own), and plain INCR for scale. Prints a
# Markdown table.
#
#   bench/script_cost.sh [BUILD_DIR]      (default: build; needs bench/compare_driver)
#
# Environment: CALLS=10000 measured calls per row (after 2,000 warm-up calls). BREAKDOWN=1 adds
# a second table: where each tollgate row's instructions go, from callgrind_annotate's inclusive
# counts of redis-server's functions: reading calls and writing replies (all but
# evalGenericCommand), a call's set-up (evalGenericCommand less lua_pcall: KEYS, ARGV, the
# reply), the script's Lua (lua_pcall less the function that calls scriptCall, Lua's
# redis.call, whose name Debian's binary does not keep), Redis's side of redis.call (that
# function less scriptCall), and the commands the script runs (scriptCall).
# Needs valgrind (scripts/bootstrap installs it). Takes about 2 minutes: Redis runs about
# 50 times slower under callgrind.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
CALLS=${CALLS:-10000}
WARMUP_CALLS=2000
DRIVER="$BUILD/bench/compare_driver"
[ -x "$DRIVER" ] || { echo "script_cost: $DRIVER not built (cmake --build $BUILD --target compare_driver)" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "script_cost: valgrind missing (scripts/bootstrap installs it)" >&2; exit 1; }

WORK=$(mktemp -d)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
valgrind --tool=callgrind --callgrind-out-file="$WORK/callgrind.out.%p" \
  redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$WORK" \
  --loglevel warning >"$WORK/valgrind.log" 2>&1 &
REDIS_PID=$!
cleanup() {
  redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || kill "$REDIS_PID" 2>/dev/null || true
  wait "$REDIS_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
for _ in $(seq 100); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.2; done
redis-cli -p "$PORT" ping >/dev/null

# The number of commands named by the regular expression $COUNTED (script calls, or INCRs:
# commands a script runs count too) Redis has executed so far.
COUNTED='evalsha|eval'
executed() {
  redis-cli -p "$PORT" INFO commandstats |
    awk -F'[=,:]' -v counted="^cmdstat_($COUNTED)$" '$1 ~ counted {n += $3} END {print n + 0}'
}

# Runs "$@" (the measured calls) with callgrind's counters zeroed before and dumped after;
# prints the instructions Redis executed and the script calls (and INCRs) it ran meanwhile
# (counted by Redis: a call the client gave up on still counts if Redis ran it, and one it
# never sent does not).
measure() {
  local before after dump
  before=$(executed)
  callgrind_control -z "$REDIS_PID" >/dev/null 2>&1
  "$@" >/dev/null
  callgrind_control -d "$REDIS_PID" >/dev/null 2>&1
  after=$(executed)
  dump=$(ls -t "$WORK"/callgrind.out."$REDIS_PID".* | head -1)
  awk -v n="$((after - before))" '/^(summary|totals):/ {printf "%.0f %d\n", $2, n; exit}' "$dump"
  if [ "${BREAKDOWN:-0}" = 1 ]; then mv "$dump" "$WORK/last.dump"; else rm -f "$dump"; fi
}

# The BREAKDOWN row of the last measured dump: its name, then instructions per decision ($2
# decisions) in total and in each part (see the header).
BREAKDOWN_ROWS=()
breakdown() {
  local tree="$WORK/tree"
  callgrind_annotate --inclusive=yes --tree=caller "$WORK/last.dump" >"$tree" 2>/dev/null
  rm -f "$WORK/last.dump"
  BREAKDOWN_ROWS+=("$(awk -v name="$1" -v d="$2" '
    function count(s) { gsub(",", "", s); return s + 0 }
    /PROGRAM TOTALS/ { total = count($1) }
    /\*  \?\?\?:evalGenericCommand \[/ { eval_ = count($1) }
    /\*  \?\?\?:lua_pcall \[/ { pcall_ = count($1) }
    /<  *\?\?\?:/ { caller = $0 }
    /\*  \?\?\?:scriptCall \[/ {
      commands = count($1); split(caller, c, "\\?\\?\\?:"); split(c[2], a, " "); lua_call = a[1]
    }
    { line[NR] = $0 }
    END {
      for (i = 1; i <= NR; i++) if (line[i] ~ ("\\*  \\?\\?\\?:" lua_call " \\[")) { split(line[i], f, " "); redis_call = count(f[1]) }
      printf "| %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |", name, total / d, (total - eval_) / d,
        (eval_ - pcall_) / d, (pcall_ - redis_call) / d, (redis_call - commands) / d, commands / d
    }' "$tree")")
}

SEED_SHA=$(redis-cli -p "$PORT" SCRIPT LOAD "$(cat bench/seed_token_bucket.lua)")
seed() {
  redis-benchmark -p "$PORT" -c 4 -P 32 -r 1000 -n "$1" EVALSHA "$SEED_SHA" 1 \
    'seed:{__rand_int__}' 1000000000 1000000000
}
incr() { redis-benchmark -p "$PORT" -c 4 -P 32 -r 1000 -n "$1" INCR 'incr:{__rand_int__}'; }
tollgate() {
  local calls=$1 callers=$2
  shift 2
  "$DRIVER" --via library --redis "redis://127.0.0.1:$PORT" --callers "$callers" --keys 1000 \
    --requests "$calls" "$@"
}

tollgate_tb() { tollgate "$1" 64 --algorithm token_bucket; }
tollgate_tb_one() { tollgate "$1" 1 --algorithm token_bucket; }
tollgate_fw() { tollgate "$1" 64 --algorithm fixed_window; }
tollgate_sw() { tollgate "$1" 64 --algorithm sliding_window; }
tollgate_multi() { tollgate "$1" 64 --mode multi; }
tollgate_lease() { tollgate "$1" 64 --mode lease; }

# One row: `run CALLS` makes CALLS decisions (the library's requests; a lease is two, taken
# and released); warmed up, then measured.
row() {
  local name=$1 shown=$2 run=$3 per=${4:-1} instructions calls
  "$run" "$WARMUP_CALLS" >/dev/null
  read -r instructions calls < <(measure "$run" "$CALLS")
  awk -v name="$name" -v shown="$shown" -v i="$instructions" -v c="$calls" -v d="$((CALLS * per))" \
    'BEGIN {printf "| %s | %.0f | %.3f | `%s` |\n", name, i / d, c / d, shown}'
  if [ "${BREAKDOWN:-0}" = 1 ]; then
    case "$name" in tollgate*) breakdown "$name" "$((CALLS * per))" ;; *) rm -f "$WORK/last.dump" ;; esac
  fi
}

echo "Instructions redis-server executes per decision (callgrind, $CALLS decisions after $WARMUP_CALLS warm-up)."
echo
echo "| decision | instructions per decision | script calls (INCRs) per decision | sent by |"
echo "|---|---|---|---|"
# redis-benchmark's rows: each command is a decision ($CALLS of them).
row "seed token bucket script, EVALSHA" \
  "redis-benchmark -c 4 -P 32 -r 1000 EVALSHA <seed sha> 1 'seed:{__rand_int__}' 1000000000 1000000000" seed
row "tollgate token bucket, 64 callers" \
  "compare_driver --via library --algorithm token_bucket --callers 64 --keys 1000" tollgate_tb
row "tollgate token bucket, 1 caller" \
  "compare_driver --via library --algorithm token_bucket --callers 1 --keys 1000" tollgate_tb_one
row "tollgate fixed window, 64 callers" \
  "compare_driver --via library --algorithm fixed_window --callers 64 --keys 1000" tollgate_fw
row "tollgate sliding window, 64 callers" \
  "compare_driver --via library --algorithm sliding_window --callers 64 --keys 1000" tollgate_sw
row "tollgate 3 limits in one request (tb+fw+sw), 64 callers" \
  "compare_driver --via library --mode multi --callers 64 --keys 1000" tollgate_multi
row "tollgate concurrency lease, an acquire or a release, 64 callers" \
  "compare_driver --via library --mode lease --callers 64 --keys 1000" tollgate_lease 2
COUNTED=incr
row "plain INCR" "redis-benchmark -c 4 -P 32 -r 1000 INCR 'incr:{__rand_int__}'" incr
if [ "${BREAKDOWN:-0}" = 1 ]; then
  echo
  echo "Where a decision's instructions go (per decision; see bench/script_cost.sh's header)."
  echo
  echo "| decision | total | reading calls, writing replies | a call's set-up | the script's Lua | Redis's side of redis.call | the commands the script runs |"
  echo "|---|---:|---:|---:|---:|---:|---:|"
  printf '%s\n' "${BREAKDOWN_ROWS[@]}"
fi
