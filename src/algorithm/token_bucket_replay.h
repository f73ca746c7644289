// Copyright tollgate authors. What a token bucket still owes for consumption made elsewhere.
//
// Reconciliation (docs/resilience.md#reconciliation): while Redis is away each of N
// instances admits from a local bucket at its share (capacity / N, refill / N). When Redis
// returns, what matters of that consumption is what a real bucket would still feel *now*:
// consumption spread over the outage has been refilled since, only the recent part is owed.
//
// The consumption is recorded in time slices (no longer than a fraction of the bucket's fill
// time) and replayed here, in time order, against the instance's exact share of the limit
// (refill rate / N, and so capacity / N, unrounded, with the limit's own fill time), as a
// bucket that was full before the first slice:
//   rate    = refill_per_second / N
//   e       = -inf
//   e       = max(e, at_i - fill_time) + cost_i / rate      for each slice, in time order
//   owed    = max(0, e - (now - fill_time)) * rate           (tokens missing at `now`)
// Charged to the shared bucket as `owed` tokens consumed now, the N instances' charges add up
// to at least what one bucket fed with all their consumption would miss at `now` (the sum
// of per-instance deficits at rate / N bounds the deficit of the sum at rate), and equal it
// when the consumption was spread evenly: a user within the limit is not put into debt, and
// the whole run admits no more than the limit permits.
#ifndef TOLLGATE_SRC_ALGORITHM_TOKEN_BUCKET_REPLAY_H_
#define TOLLGATE_SRC_ALGORITHM_TOKEN_BUCKET_REPLAY_H_

#include <cmath>
#include <cstdint>
#include <span>

#include "src/algorithm/token_bucket.h"

namespace tollgate::algorithm {

// Consumption of one time slice: `cost` tokens, charged as of `at_micros` (the slice's
// latest consumption).
struct ConsumptionSlice {
  int64_t at_micros = 0;
  int64_t cost = 0;
};

// The length of the slices that consumption of a bucket with `params` is recorded in: an
// eighth of its fill time, at least 1 ms. REQUIRES: params valid.
inline int64_t ReplaySliceMicros(const TokenBucketParams& params) {
  const double fill = static_cast<double>(params.capacity) * 1e6 / params.refill_per_second;
  const double slice = fill / 8;
  if (!(slice >= 1000)) return 1000;
  if (slice >= 9.0e18) return int64_t{9'000'000'000'000'000'000};
  return static_cast<int64_t>(slice);
}

// Whole tokens that `slices` still owe at `now_micros` to the share of `limit` that one of
// `instances` instances holds (full before the first slice), rounded up; 0 when it has
// refilled since. Not capped: consumption faster than the share permits (a `local` policy's
// own numbers) owes it all. REQUIRES: slices in time order; limit valid; instances >= 1;
// every cost >= 0.
inline int64_t TokenBucketOwedTokens(std::span<const ConsumptionSlice> slices, int64_t now_micros,
                                     const TokenBucketParams& limit, int64_t instances) {
  if (slices.empty()) return 0;
  const double rate = limit.refill_per_second / static_cast<double>(instances);
  const double fill_time = static_cast<double>(limit.capacity) * 1e6 / limit.refill_per_second;
  double empty_at = static_cast<double>(slices.front().at_micros) - fill_time;
  for (const ConsumptionSlice& slice : slices) {
    const double full_at = static_cast<double>(slice.at_micros) - fill_time;
    if (full_at > empty_at) empty_at = full_at;
    empty_at += static_cast<double>(slice.cost) * 1e6 / rate;
  }
  const double deficit_micros = empty_at - (static_cast<double>(now_micros) - fill_time);
  if (!(deficit_micros > 0)) return 0;
  return static_cast<int64_t>(std::ceil(deficit_micros * rate / 1e6 - 1e-6));
}

}  // namespace tollgate::algorithm

#endif  // TOLLGATE_SRC_ALGORITHM_TOKEN_BUCKET_REPLAY_H_
