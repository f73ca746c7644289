#!/usr/bin/env bash
# Plots sync mode's overshoot: requests wrongly allowed (admitted beyond the limit, as a
# percentage of all requests offered) versus sync interval and versus load-balancer skew,
# for 8 instances with `shares: demand`, each point measured by bench/sync_bench
# (BM_SyncOvershoot), next to the documented bound (round trip / interval); and the
# under-admission: the share of the limit admitted versus skew, `shares: equal` and `demand`.
#
#   bench/plots/sync_overshoot.sh OUT_DIR [BUILD_DIR]
#
# With BUILD_DIR, runs BUILD_DIR/bench/sync_bench --benchmark_filter=BM_SyncOvershoot with
# TOLLGATE_BENCH_OUT=OUT_DIR first (about a minute); without it, plots the points already in
# OUT_DIR/sync_overshoot.tsv. Writes OUT_DIR/sync_overshoot.png and OUT_DIR/sync_overshoot.md
# (the table). Needs gnuplot (gnuplot-nox, installed by scripts/bootstrap).
set -euo pipefail
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 OUT_DIR [BUILD_DIR]" >&2
  exit 2
fi
out=$1
build=${2:-}
mkdir -p "$out"
tsv=$out/sync_overshoot.tsv
if [ -n "$build" ]; then
  bench=$build/bench/sync_bench
  if [ ! -x "$bench" ]; then
    echo "$0: $bench not built" >&2
    exit 1
  fi
  TOLLGATE_BENCH_OUT=$out "$bench" --benchmark_filter=BM_SyncOvershoot \
    --benchmark_counters_tabular=true >&2
fi
if [ ! -s "$tsv" ]; then
  echo "$0: no points in $tsv (run with BUILD_DIR, or sync_bench with TOLLGATE_BENCH_OUT)" >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# One file per series, demand shares: <algorithm>_skew<skew> (x = interval) and
# <algorithm>_int<interval> (x = skew), columns x, wrongly allowed %, bound %; both shares:
# <algorithm>_<shares>_used<interval> (x = skew), columns x, used %.
awk -F'\t' -v dir="$work" 'NR > 1 {
  if ($10 == "demand") {
    print $2, $5, $6 >> (dir "/" $1 "_skew" $3 ".dat")
    print $3, $5, $6 >> (dir "/" $1 "_int" $2 ".dat")
  }
  print $3, $8 >> (dir "/" $1 "_" $10 "_used" $2 ".dat")
}' "$tsv"
for f in "$work"/*.dat; do sort -n -o "$f" "$f"; done
round_trip=$(awk -F'\t' 'NR == 2 { print $4 }' "$tsv")

# Zero cannot sit on a log scale: points of 0% are drawn on the floor line, labeled so.
floor=0.0001
gnuplot <<GNUPLOT
set terminal pngcairo size 2100,560 font "sans,11"
set output "$out/sync_overshoot.png"
set multiplot layout 1,3 title "Sync mode, 8 instances, 1,000/s limit, 20,000/s offered, sync round trip ${round_trip} µs (simulated time, 20 windows per point)"
set logscale y
set yrange [$floor/2:20]
set format y "%g%%"
set ylabel "wrongly allowed (% of all requests)"
set grid
set key top right font ",9"
f(y) = y > $floor ? y : $floor

set logscale x
set xrange [7:1400]
set xtics ("10 ms" 10, "100 ms" 100, "1 s" 1000)
set xlabel "sync interval"
set title "versus sync interval"
plot "$work/fixed_window_skew50.dat" using 1:3 with lines dt 2 lw 2 lc rgb "black" title "bound: round trip / interval", \
     for [s in "12 50 90 100"] "$work/fixed_window_skew".s.".dat" using 1:(f(\$2)) with linespoints lw 2 pt 7 title "fixed window, ".s."% on instance 0", \
     for [s in "12 50 90 100"] "$work/sliding_window_skew".s.".dat" using 1:(f(\$2)) with linespoints lw 2 pt 5 dt 3 title "sliding window, ".s."% on instance 0", \
     $floor with lines lc rgb "gray" dt 4 title "0 (drawn here)"

unset logscale x
set xrange [5:105]
set xtics ("12%% (even)" 12.5, "50%%" 50, "90%%" 90, "100%% (pinned)" 100)
set xlabel "share of the traffic on instance 0"
set title "versus skew"
plot for [i in "10 100 1000"] "$work/fixed_window_int".i.".dat" using 1:(f(\$2)) with linespoints lw 2 pt 7 title "fixed window, every ".i." ms", \
     for [i in "10 100 1000"] "$work/sliding_window_int".i.".dat" using 1:(f(\$2)) with linespoints lw 2 pt 5 dt 3 title "sliding window, every ".i." ms", \
     $floor with lines lc rgb "gray" dt 4 title "0 (drawn here)"

unset logscale y
set yrange [0:105]
set format y "%g%%"
set ylabel "admitted (% of the limit)"
set title "under-admission: what the key gets, every 100 ms"
set key bottom left font ",9"
plot for [p in "demand equal"] "$work/fixed_window_".p."_used100.dat" using 1:2 with linespoints lw 2 pt 7 title "fixed window, shares: ".p, \
     for [p in "demand equal"] "$work/sliding_window_".p."_used100.dat" using 1:2 with linespoints lw 2 pt 5 dt 3 title "sliding window, shares: ".p
unset multiplot
GNUPLOT

{
  echo "## Sync mode overshoot (bench/plots/sync_overshoot.sh)"
  echo
  echo "8 instances, 1,000/s limit, 20,000/s offered, sync round trip ${round_trip} µs, simulated"
  echo "time, 20 windows per point. Wrongly allowed: admitted beyond the limit, % of all requests."
  echo
  echo "![sync overshoot](sync_overshoot.png)"
  echo
  echo "| algorithm | shares | interval | load on instance 0 | wrongly allowed | bound | worst excess (% of limit) | used |"
  echo "|---|---|---|---|---|---|---|---|"
  awk -F'\t' 'NR > 1 {
    printf "| %s | %s | %s ms | %s%% | %.5f%% | %.2f%% | %.2f%% | %.1f%% |\n", $1, $10, $2, $3, $5, $6, $7, $8
  }' "$tsv"
} > "$out/sync_overshoot.md"
echo "wrote $out/sync_overshoot.png and $out/sync_overshoot.md"
