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
// Weights: with `shares: equal` (Shares::kEqual) every live instance weighs 1, so one
// instance's weights are {1, N} (EqualWeights). With `shares: demand` (Shares::kDemand, sync
// mode) an instance weighs what it reported asked of it in its last sync interval, at least a
// floor of 1/(10N) of the fleet's demand (DemandWeights); an instance that has not reported
// demand for a key is held back, and may spend before its first sync, only FirstShare(limit,
// N, kDemand) = floor(limit / (10N)), and a fixed window's next first share is set aside at
// each sync of the window before (NextFirstShare).
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

#include "absl/types/span.h"
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

// Shares::kDemand: an instance that has reported no demand weighs 1/(10N) of the fleet's
// demand, and its first share is floor(limit / (10N)).
inline constexpr int64_t kDemandFloorDivisor = 10;
// Shares::kDemand: a demand report older than this many of the limit's sync intervals is not
// fresh (its instance stopped syncing the key: it weighs the floor again).
inline constexpr int64_t kDemandHorizonIntervals = 3;

// Sync mode, before an instance holds a grant in a window (its first check of a key, a fixed
// window's start, a key over SyncStoreOptions::max_keys) and without a first share set aside
// for it (NextFirstShare): it may spend its part of what is `left` as far as it knows (the
// limit less its view of the window's use): 1/N (kEqual), 1/(10N) (kDemand; all of it when N
// is 1: no other instance holds anything back). Every sync script holds FirstShare(limit, N,
// shares) back for each live instance without a grant or a first share, so that is never more
// than what the others leave it: N * FirstShare(limit, N, shares) <= limit.
inline int64_t FirstShare(double left, int64_t instances, Shares shares) {
  const ShareWeights weights = EqualWeights(instances);
  return Share(left, shares == Shares::kDemand && weights.total > 1
                         ? ShareWeights{1, weights.total * kDemandFloorDivisor}
                         : weights);
}
inline int64_t FirstShare(double left, int64_t instances) {
  return FirstShare(left, instances, Shares::kEqual);
}

// Shares::kDemand: the weights of the instance that reports `self_demand` (units asked of it,
// admitted or refused, since its last sync of the key), given the fresh reports of the others
// (`other_demands`) among `instances` (N) live ones. With D the sum of the fresh demands, this
// one's included: D == 0 gives EqualWeights(N); otherwise every instance with a fresh report
// weighs max(10N * d, D) and each of the max(0, N - 1 - others) without one weighs D, so an
// instance's part is its share of the demand, never below 1/(10N) of it relative to the others.
// Integers, exact below 2^53 (the script computes them in doubles): REQUIRES demands >= 0 and
// 10N * D < 2^53.
inline ShareWeights DemandWeights(int64_t self_demand, absl::Span<const int64_t> other_demands,
                                  int64_t instances) {
  const int64_t n = std::max<int64_t>(1, instances);
  int64_t fleet = self_demand;
  for (int64_t demand : other_demands) fleet += demand;
  if (fleet <= 0) return EqualWeights(n);
  const int64_t scale = kDemandFloorDivisor * n;
  ShareWeights weights;
  weights.self = std::max(scale * self_demand, fleet);
  weights.total = weights.self;
  for (int64_t demand : other_demands) weights.total += std::max(scale * demand, fleet);
  const int64_t unreported = n - 1 - static_cast<int64_t>(other_demands.size());
  if (unreported > 0) weights.total += unreported * fleet;
  return weights;
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
  // (kDemand, fixed window) Also the first shares set aside for this window for instances that
  // have not synced it yet (NextFirstShare, at their syncs of the window before).
  int64_t held_by_others = 0;
  // The other live instances with nothing of the above, N - 1 less those counted above when
  // that is positive: each may be spending its FirstShare(limit, N, shares).
  int64_t others_without_grant = 0;
  int64_t instances = 1;  // N
  Shares shares = Shares::kEqual;
  // This instance's: EqualWeights(N) (kEqual), DemandWeights (kDemand).
  ShareWeights weights;
};

// grant = Share(limit - used - held, weights), held = held_by_others + others_without_grant
// * FirstShare(limit, N, shares). Bound: used + held + grant <= limit whenever used + held <=
// limit, and 0 otherwise; so across every sync of every instance, counted + granted never
// exceeds the limit (each grant comes out of what the counter and the others' grants leave).
inline int64_t SyncGrant(const SyncGrantInput& in) {
  const int64_t held =
      in.held_by_others + in.others_without_grant * FirstShare(in.limit, in.instances, in.shares);
  return Share(static_cast<double>(in.limit) - in.used - static_cast<double>(held), in.weights);
}

// Shares::kDemand, fixed window: what a sync in window w sets aside for this instance to spend
// in window w + 1 before its first sync of it, in place of FirstShare(limit, N, kDemand).
struct NextFirstShareInput {
  int64_t limit = 0;
  // The first shares of window w + 1 the other instances hold, and how many hold one.
  int64_t others_first_shares = 0;
  int64_t others_with_first_share = 0;
  int64_t instances = 1;  // N
  ShareWeights weights;   // this instance's DemandWeights
  // Whether another instance has synced window w + 1 already (a sync that reaches Redis late,
  // or a clock behind): its grant was computed holding what this instance had set aside then,
  // `own_first_share` (-1: none, so the floor), which this one may therefore not exceed.
  bool next_window_started = false;
  int64_t own_first_share = -1;
};

// min(Share(limit, weights), limit - others' first shares - FirstShare(limit, N, kDemand) for
// each of the N - 1 - others_with_first_share others without one), and once window w + 1 has
// started at most what was set aside before; never negative. Bound: every first share of a
// window and the floors of the instances without one sum to at most the limit when they did
// before this one was set (at a fixed N), and what the grants of window w + 1 hold for this
// instance is never less than its first share.
inline int64_t NextFirstShare(const NextFirstShareInput& in) {
  const int64_t floor = FirstShare(in.limit, in.instances, Shares::kDemand);
  const int64_t unreported = std::max<int64_t>(0, in.instances - 1 - in.others_with_first_share);
  int64_t share = std::min(Share(static_cast<double>(in.limit), in.weights),
                           in.limit - in.others_first_shares - unreported * floor);
  if (in.next_window_started) {
    share = std::min(share, in.own_first_share >= 0 ? in.own_first_share : floor);
  }
  return std::max<int64_t>(0, share);
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
// While the store answers, every instance reports each limit's requests asked for (admitted
// and refused) per period (an epoch of Redis' clock, InstanceRegistryOptions::demand_period_ms),
// and learns the fleet's total of the two last complete periods (src/resilience/
// fallback_shares.cc, src/store/redis/lua/heartbeat.lua). Its fallback fraction of a limit is,
// with m = kFallbackDemandPrior,
//
//   g(p)     = (own(p) + m) / (fleet(p) + N m)                (for each period p learned)
//   learned  = min(g(p) over the two periods), clamped to [1/(10 N), 1]
//   fraction = 1/N + freshness * (learned - 1/N)             (nothing learned: 1/N)
//
// Bound: instances whose newest learned periods are at most one period apart share one
// period p (both pairs hold it), and the min is at most g(p) there; the own(p) of all instances
// sum to at most fleet(p) (each is what this instance added to that very total), so their
// g(p) sum to at most 1. So the learned fractions of the fleet sum to at most
// 1 + N * 1/(10 N) = 1.1, with equal freshness; freshness that differs by d between instances
// adds at most d. An instance that learned nothing (freshness 0, or no period) takes 1/N, as
// with equal shares.

// What one instance learned of one limit in one period.
struct FallbackDemandPeriod {
  int64_t own = 0;    // requests this instance asked for (and the store counted)
  int64_t fleet = 0;  // requests every instance asked for, this one's included
};

// The floor of a learned fraction is 1 / (kFallbackDemandFloorDivisor * N).
inline constexpr int64_t kFallbackDemandFloorDivisor = 10;
// Requests every instance is taken to have asked in a period beyond those it counted: the
// prior that keeps a period of few requests (a share learned from 2 or 3 requests an
// instance, where chance alone leaves some instances at 0) near the equal share, and weighs
// nothing once hundreds came.
inline constexpr int64_t kFallbackDemandPrior = 4;
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
  const double prior = static_cast<double>(kFallbackDemandPrior);
  for (const FallbackDemandPeriod& period : periods.first(std::min<size_t>(periods.size(), 2))) {
    // Each instance counts kFallbackDemandPrior requests more than it saw, so a period of few
    // requests says little: with none, every instance's g is 1/N exactly.
    const double own = static_cast<double>(std::max<int64_t>(0, period.own)) + prior;
    const double fleet = static_cast<double>(std::max<int64_t>(0, period.fleet)) + prior * n;
    learned = std::min(learned, own / fleet);
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
