// Copyright tollgate authors. Options shared by the Google Benchmark targets.
#ifndef TOLLGATE_BENCH_BENCH_OPTIONS_H_
#define TOLLGATE_BENCH_BENCH_OPTIONS_H_

#include <cstdlib>
#include <string_view>

namespace tollgate::bench {

// True under `make bench QUICK=1` (scripts/bench sets TOLLGATE_BENCH_QUICK=1): every
// benchmark runs briefly, to show that it works and roughly what it measures.
inline bool Quick() {
  const char* quick = std::getenv("TOLLGATE_BENCH_QUICK");
  return quick != nullptr && std::string_view(quick) == "1";
}

// The minimum time, in seconds, of a benchmark that sets the time itself (one whose set-up
// is costly, such as filling a million keys): `full`, or a tenth of it when Quick().
inline double MinTimeSeconds(double full) { return Quick() ? full / 10 : full; }

// How many times a row a goal is judged on runs (one when Quick()). Such a row reports the
// mean, median, standard deviation and coefficient of variation of its runs, and the goal is
// judged on the median: on a shared VM one run can land in a busy second and be 20% slower
// than the next (see BENCHMARKS.md), while the median of runs spread over several seconds
// moves much less.
inline int GoalRepetitions() { return Quick() ? 1 : 9; }

}  // namespace tollgate::bench

#endif  // TOLLGATE_BENCH_BENCH_OPTIONS_H_
