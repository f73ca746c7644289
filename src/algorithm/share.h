// Copyright tollgate authors. One instance's share of a limit that N instances enforce together.
//
// Every rule that divides a limit among the live instances is here: the grants of sync mode
// (mirrored, in the same atomic step that counts, by src/store/redis/lua/sync.lua), what a
// sync instance may spend before it holds a grant, and the fail_open fallback's local limit.
// Pure functions, no I/O, no clock. The one rule underneath is
//
//   Share(left, weights) = floor(max(0, left) * weights.self / weights.total)
//
// computed in doubles, in this order, with 1e-9 added before the floor, exactly as sync.lua
// computes it (so a sliding window's `left` of 49.9999999999 is 49 neither here nor there);
// exact for amounts below 2^53, as the scripts are. tests/sync_script_test.cc
// (SyncScriptTest.GrantTableMatchesTheShareModule) checks that the script hands out the grants
// SyncGrant computes, against a real redis-server.
//
// Weights: today every live instance weighs 1, so one instance's weights are {1, N}
// (EqualWeights). Demand-weighted shares (issue 26) change the weights, not the callers.
//
// docs/sync.md ("What an instance knows") and docs/resilience.md ("Failure policies") state
// the same rules for users.
#ifndef TOLLGATE_SRC_ALGORITHM_SHARE_H_
#define TOLLGATE_SRC_ALGORITHM_SHARE_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include "src/algorithm/outcome.h"
#include "tollgate/limit.h"

namespace tollgate::algorithm {

// One instance's weight and the sum of the weights of every live instance, its own included.
// REQUIRES: 0 <= self <= total, total >= 1.
struct ShareWeights {
  int64_t self = 1;
  int64_t total = 1;
};

// Every one of `instances` live instances weighs the same: {1, N} (N below 1 counts as 1).
inline ShareWeights EqualWeights(int64_t instances) {
  return ShareWeights{1, std::max<int64_t>(1, instances)};
}

// floor(max(0, left) * self / total): never negative, and the shares of instances whose
// weights sum to the total never sum to more than max(0, left).
inline int64_t Share(double left, ShareWeights weights) {
  return FloorAtLeastZero(
      left * static_cast<double>(weights.self) / static_cast<double>(weights.total) + 1e-9);
}

// Sync mode, before an instance holds a grant in a window (its first check of a key, a fixed
// window's start, a key over SyncStoreOptions::max_keys): it may spend 1/N of what is `left`
// as far as it knows (the limit less its view of the window's use). Every sync script holds
// FirstShare(limit, N) back for each live instance without a grant, so that is never more
// than what the others leave it: FirstShare(limit, N) * N <= limit.
inline int64_t FirstShare(double left, int64_t instances) {
  return Share(left, EqualWeights(instances));
}

// What one sync hands one instance, in the script's atomic step that has just counted its
// units (src/store/redis/lua/sync.lua computes the same).
struct SyncGrantInput {
  int64_t limit = 0;
  // The window's use once this sync's units are counted: the counter (fixed window), or
  // previous * weight + counter (sliding window, weighed at Redis' time).
  double used = 0;
  // What the other instances that synced the window may still spend without syncing: the sum
  // of their outstanding grants (for a sliding window, also the grants of the previous window
  // that instances not yet synced in this one carry over).
  int64_t held_by_others = 0;
  // The other live instances with no grant at all, N - 1 less those counted above when that is
  // positive: each may be spending its FirstShare(limit, N).
  int64_t others_without_grant = 0;
  int64_t instances = 1;  // N
  ShareWeights weights;   // this instance's; EqualWeights(instances) today
};

// grant = Share(limit - used - held, weights), held = held_by_others + others_without_grant
// * FirstShare(limit, N). Bound: used + held + grant <= limit whenever used + held <= limit,
// and 0 otherwise; so across every sync of every instance, counted + granted never exceeds
// the limit (each grant comes out of what the counter and the others' grants leave).
inline int64_t SyncGrant(const SyncGrantInput& in) {
  const int64_t held =
      in.held_by_others + in.others_without_grant * FirstShare(in.limit, in.instances);
  return Share(static_cast<double>(in.limit) - in.used - static_cast<double>(held), in.weights);
}

// fail_open while the store is unreachable: this instance's share of `amount` (a window's limit,
// a bucket's capacity), never below 1. Bounds: >= 1, so an instance that has never seen a key
// still admits something; with equal weights the N shares sum to at most max(amount, N).
inline int64_t FallbackShare(int64_t amount, ShareWeights weights) {
  return std::max<int64_t>(1, Share(static_cast<double>(amount), weights));
}

// The numbers of fail_open's local limiter for `numbers`: FallbackShare of the limit or the
// capacity, and a token bucket's refill in proportion (weights.self / weights.total, not
// rounded). An instance with the whole weight keeps the numbers as they are.
inline LimitNumbers FallbackNumbers(const LimitNumbers& numbers, ShareWeights weights) {
  if (weights.self >= weights.total) return numbers;
  LimitNumbers share = numbers;
  share.capacity = FallbackShare(numbers.capacity, weights);
  share.refill_per_second = numbers.refill_per_second * static_cast<double>(weights.self) /
                            static_cast<double>(weights.total);
  share.limit = FallbackShare(numbers.limit, weights);
  return share;
}

// ---- fail_open's demand-weighted shares (Shares::kDemand) ----
//
// While the store answers, every instance reports each limit's units asked for (admitted and
// refused) per period (an epoch of Redis' clock, InstanceRegistryOptions::demand_period_ms),
// and learns the fleet's total of the two last complete periods (src/resilience/
// fallback_shares.cc, src/store/redis/lua/heartbeat.lua). Its fallback fraction of a limit is
//
//   g(p)     = own(p) / fleet(p) if fleet(p) > 0, else 1/N   (for each period p learned)
//   learned  = min(g(p) over the two periods), clamped to [1/(10 N), 1]
//   fraction = 1/N + freshness * (learned - 1/N)             (nothing learned: 1/N)
//
// Bound: instances whose newest learned periods are at most one period apart share one
// period p (both pairs hold it), and the min is at most g(p) there; the own(p) of all instances
// sum to at most fleet(p) (each is what this instance added to that very total). So the
// learned fractions of the fleet sum to at most 1 + N * 1/(10 N) = 1.1, with equal freshness;
// freshness that differs by d between instances adds at most d. An instance that learned
// nothing (freshness 0, or no period) takes 1/N, as with equal shares.

// What one instance learned of one limit in one period.
struct FallbackDemandPeriod {
  int64_t own = 0;    // units this instance asked for (and the store counted)
  int64_t fleet = 0;  // units every instance asked for, this one's included
};

// The floor of a learned fraction is 1 / (kFallbackDemandFloorDivisor * N).
inline constexpr int64_t kFallbackDemandFloorDivisor = 10;
// FallbackFractionWeights' resolution: a millionth of an equal share.
inline constexpr int64_t kFallbackWeightScale = 1'000'000;

// The fraction of a limit this instance's fallback takes, by the rule above, from the periods
// it learned (0 to 2; more are ignored beyond the first two) and `freshness` (1 just learned,
// falling to 0 when what was learned is forgotten; clamped to [0, 1]). Returns a value in
// [1/(10 N), 1]; exactly 1.0 / N when nothing is learned.
inline double FallbackDemandFraction(std::span<const FallbackDemandPeriod> periods,
                                     int64_t instances, double freshness) {
  const double n = static_cast<double>(std::max<int64_t>(1, instances));
  const double equal = 1.0 / n;
  freshness = std::clamp(freshness, 0.0, 1.0);
  if (periods.empty() || freshness <= 0) return equal;
  double learned = 1.0;
  for (const FallbackDemandPeriod& period : periods.first(std::min<size_t>(periods.size(), 2))) {
    const double g = period.fleet > 0 ? static_cast<double>(std::max<int64_t>(0, period.own)) /
                                            static_cast<double>(period.fleet)
                                      : equal;
    learned = std::min(learned, g);
  }
  learned = std::clamp(learned, 1.0 / (static_cast<double>(kFallbackDemandFloorDivisor) * n), 1.0);
  // Clamped so that rounding never takes it past either end (freshness 1: exactly `learned`).
  return std::clamp(equal + freshness * (learned - equal), std::min(learned, equal),
                    std::max(learned, equal));
}

// Weights for `fraction` of a limit among `instances`: {round(fraction * N * scale), N * scale},
// so 1/N gives exactly the equal share (EqualWeights' Share) and 1 the whole limit.
// REQUIRES: 0 <= fraction <= 1.
inline ShareWeights FallbackFractionWeights(double fraction, int64_t instances) {
  const int64_t total = std::max<int64_t>(1, instances) * kFallbackWeightScale;
  const auto self = static_cast<int64_t>(
      std::llround(std::clamp(fraction, 0.0, 1.0) * static_cast<double>(total)));
  return ShareWeights{std::min(self, total), total};
}

}  // namespace tollgate::algorithm

#endif  // TOLLGATE_SRC_ALGORITHM_SHARE_H_
