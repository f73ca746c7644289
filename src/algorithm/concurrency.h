// Copyright tollgate authors. A concurrency limit's lease set as pure functions.
//
// A concurrency limit holds at most `limit` leases at once per key. The state is the set of
// leases held, each an id and the time it expires (in microseconds); a lease that is neither
// released nor renewed expires, so a holder that dies frees its slot within one lease time.
// Every step first forgets the leases expired at `now` (expiry <= now), then:
//   acquire (cost 1)  allowed when held + 1 <= limit: the lease `id` expires at now + lease;
//   peek (cost 0)     nothing changes; refused only when held > limit (the limit was lowered);
//   release           the lease `id` is removed; allowed when it was held, else kNotFound;
//   renew             the lease `id`, if held, expires at now + lease; else kNotFound.
// The decision: remaining = limit - held (at least 0; debt the leases held beyond the limit),
// reset_after = until the last lease held expires, and retry_after, when no slot is free,
// = until enough leases expire for one more to fit (the (held - limit + 1)-th earliest
// expiry). src/store/redis/lua/check.lua keeps the set as a sorted set (score = expiry) and
// computes the same decisions (tests/redis_store_test.cc's ConcurrencyTableMatchesTheAlgorithm).
#ifndef TOLLGATE_SRC_ALGORITHM_CONCURRENCY_H_
#define TOLLGATE_SRC_ALGORITHM_CONCURRENCY_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "src/algorithm/outcome.h"

namespace tollgate::algorithm {

struct ConcurrencyParams {
  // REQUIRES: limit >= 1, lease_micros >= 1.
  int64_t limit = 1;
  int64_t lease_micros = 1'000'000;
};

struct HeldLease {
  int64_t expires_at_micros = 0;
  std::string id;
  bool operator==(const HeldLease&) const = default;
};

struct ConcurrencyState {
  // Sorted by (expires_at_micros, id), as a Redis sorted set orders its members.
  std::vector<HeldLease> leases;
  bool operator==(const ConcurrencyState&) const = default;
};

namespace internal {

inline bool Earlier(const HeldLease& a, const HeldLease& b) {
  return a.expires_at_micros != b.expires_at_micros ? a.expires_at_micros < b.expires_at_micros
                                                    : a.id < b.id;
}

// Adds `lease` to `live`, keeping the order.
inline void Insert(ConcurrencyState& live, HeldLease lease) {
  live.leases.insert(std::upper_bound(live.leases.begin(), live.leases.end(), lease, Earlier),
                     std::move(lease));
}

// The leases of `state` still held at `now`.
inline ConcurrencyState Live(const std::optional<ConcurrencyState>& state, int64_t now_micros) {
  ConcurrencyState live;
  if (!state.has_value()) return live;
  for (const HeldLease& lease : state->leases) {
    if (lease.expires_at_micros > now_micros) live.leases.push_back(lease);
  }
  return live;
}

// The decision's numbers for `live` (held leases, sorted) at `now`. `allowed` and `reason`
// are the caller's; retry_after is set when no slot is free.
inline void Describe(const ConcurrencyState& live, int64_t now_micros,
                     const ConcurrencyParams& params, Decision& decision) {
  const auto held = static_cast<int64_t>(live.leases.size());
  decision.limit = params.limit;
  SetRemaining(params.limit - held, decision);
  decision.reset_after_micros = held > 0 ? live.leases.back().expires_at_micros - now_micros : 0;
  decision.retry_after_micros =
      held >= params.limit
          ? live.leases[static_cast<size_t>(held - params.limit)].expires_at_micros - now_micros
          : 0;
}

inline Outcome<ConcurrencyState> Answer(ConcurrencyState live, int64_t now_micros,
                                        const ConcurrencyParams& params, bool allowed,
                                        DenyReason reason, bool changed) {
  Outcome<ConcurrencyState> out;
  Describe(live, now_micros, params, out.decision);
  out.decision.allowed = allowed;
  out.decision.reason = reason;
  out.changed = changed;
  out.expires_at_micros = live.leases.empty() ? now_micros : live.leases.back().expires_at_micros;
  out.state = std::move(live);
  return out;
}

}  // namespace internal

// Acquires the lease `id` (cost 1) or peeks at the slots (cost 0). A cost above 1 is refused
// with kCostExceedsLimit (a lease takes one slot). `changed` is true when the state is to be
// kept: a lease was taken, or expired ones were forgotten. REQUIRES: cost >= 0; `id`
// non-empty when cost is 1.
inline Outcome<ConcurrencyState> ConcurrencyAcquire(const std::optional<ConcurrencyState>& state,
                                                    int64_t now_micros,
                                                    const ConcurrencyParams& params,
                                                    std::string_view id, int64_t cost) {
  ConcurrencyState live = internal::Live(state, now_micros);
  const bool pruned = state.has_value() && live.leases.size() != state->leases.size();
  const auto held = static_cast<int64_t>(live.leases.size());
  if (cost > 1 || cost > params.limit) {
    return internal::Answer(std::move(live), now_micros, params, false,
                            DenyReason::kCostExceedsLimit, pruned);
  }
  if (held + cost > params.limit) {
    return internal::Answer(std::move(live), now_micros, params, false, DenyReason::kOverLimit,
                            pruned);
  }
  if (cost == 0) {
    return internal::Answer(std::move(live), now_micros, params, true, DenyReason::kNone, pruned);
  }
  internal::Insert(live, HeldLease{now_micros + params.lease_micros, std::string(id)});
  Outcome<ConcurrencyState> out =
      internal::Answer(std::move(live), now_micros, params, true, DenyReason::kNone, true);
  out.decision.retry_after_micros = 0;  // a check that passed waits for nothing
  return out;
}

namespace internal {

// Release (renew false) or Renew (true) of lease `id`: see those.
inline Outcome<ConcurrencyState> ReleaseOrRenew(const std::optional<ConcurrencyState>& state,
                                                int64_t now_micros, const ConcurrencyParams& params,
                                                std::string_view id, bool renew) {
  ConcurrencyState live = Live(state, now_micros);
  const bool pruned = state.has_value() && live.leases.size() != state->leases.size();
  auto it = std::find_if(live.leases.begin(), live.leases.end(),
                         [&](const HeldLease& lease) { return lease.id == id; });
  if (it == live.leases.end()) {
    return Answer(std::move(live), now_micros, params, false, DenyReason::kNotFound, pruned);
  }
  HeldLease lease = std::move(*it);
  live.leases.erase(it);
  if (renew) {
    lease.expires_at_micros = now_micros + params.lease_micros;
    Insert(live, std::move(lease));
  }
  return Answer(std::move(live), now_micros, params, true, DenyReason::kNone, true);
}

}  // namespace internal

// Releases the lease `id`: allowed when it was held, kNotFound when not (expired, released,
// never granted), the set unchanged. Idempotent.
inline Outcome<ConcurrencyState> ConcurrencyRelease(const std::optional<ConcurrencyState>& state,
                                                    int64_t now_micros,
                                                    const ConcurrencyParams& params,
                                                    std::string_view id) {
  return internal::ReleaseOrRenew(state, now_micros, params, id, /*renew=*/false);
}

// Renews the lease `id` for a lease time from now: allowed when it was still held, else
// kNotFound (it expired: its slot may be another's; acquire again).
inline Outcome<ConcurrencyState> ConcurrencyRenew(const std::optional<ConcurrencyState>& state,
                                                  int64_t now_micros,
                                                  const ConcurrencyParams& params,
                                                  std::string_view id) {
  return internal::ReleaseOrRenew(state, now_micros, params, id, /*renew=*/true);
}

}  // namespace tollgate::algorithm

#endif  // TOLLGATE_SRC_ALGORITHM_CONCURRENCY_H_
