// Copyright tollgate authors. Token bucket as a pure function.
//
// The whole state is one number (as in folly's TokenBucket): `empty_at_micros`, the time
// at which the bucket would hold zero tokens. At time `now` the bucket holds
//   min(capacity, floor((now - empty_at) * (refill_per_second / 1e6) + 1e-6))
// whole tokens (the tokens per microsecond are computed once per limit, so a check multiplies
// instead of dividing). A missing state is a full bucket. Checking `cost` tokens:
//   fill_time   = capacity * 1e6 / rate                 (an empty bucket refills in this)
//   empty_at    = max(state or -inf, now - fill_time)    (cap at full)
//   next        = empty_at + cost * 1e6 / rate
//   allowed     = next <= now
// and when allowed the new state is `next`. All arithmetic is IEEE double on integer
// microseconds, in exactly this order, so src/store/redis/lua/check.lua computes
// bit-identical decisions (tests/redis_store_test.cc's TokenBucketTableMatchesTheAlgorithm).
// The build compiles ISO C++ (-std=c++20, not gnu++20), where GCC does not contract a
// multiply and an add into one fused multiply-add, which would round differently from Lua.
#ifndef TOLLGATE_SRC_ALGORITHM_TOKEN_BUCKET_H_
#define TOLLGATE_SRC_ALGORITHM_TOKEN_BUCKET_H_

#include <cstdint>
#include <optional>

#include "absl/base/attributes.h"
#include "src/algorithm/outcome.h"

namespace tollgate::algorithm {

struct TokenBucketParams {
  // REQUIRES: capacity >= 1, refill_per_second > 0.
  int64_t capacity = 1;
  double refill_per_second = 1;
};

struct TokenBucketState {
  double empty_at_micros = 0;
  bool operator==(const TokenBucketState&) const = default;
};

namespace internal {

// Whole tokens held at `now` by a bucket that is empty at `empty_at`, rounded down, at most
// `capacity`; negative when the bucket is in debt (empty_at after now, after a charge). The
// small epsilon keeps 2.9999999997 (a double rounding artefact) reported as 3.
inline int64_t WholeTokens(double now, double empty_at, double tokens_per_micro, int64_t capacity) {
  const int64_t tokens = FloorSigned((now - empty_at) * tokens_per_micro + 1e-6);
  return tokens < capacity ? tokens : capacity;
}

}  // namespace internal

// The numbers of a check that depend only on the limit, computed with the very expressions
// the check uses (and the Lua script computes), so a check that takes them from here is
// bit-identical to one that computes them: a store computes them once per limit instead of
// paying three divisions on every check.
struct TokenBucketTimes {
  // capacity * 1e6 / rate: an empty bucket refills in this.
  double fill_micros = 0;
  // 1 * 1e6 / rate: one token refills in this (the cost of a check of cost 1).
  double unit_micros = 0;
  // rate / 1e6: tokens refilled per microsecond.
  double tokens_per_micro = 0;
};

// REQUIRES: params valid (see TokenBucketParams).
inline TokenBucketTimes TokenBucketTimesFor(const TokenBucketParams& params) {
  const double rate = params.refill_per_second;
  return TokenBucketTimes{static_cast<double>(params.capacity) * 1e6 / rate,
                          static_cast<double>(int64_t{1}) * 1e6 / rate, rate / 1e6};
}

// REQUIRES: cost >= 0; `times` == TokenBucketTimesFor(params). `state` is nullopt for a key
// never seen (or expired). A cost above capacity is refused with
// DenyReason::kCostExceedsLimit. A cost of 0 (a peek) consumes nothing; it is allowed unless
// the bucket is in debt (after a charge), and its retry_after_micros says when a cost of 1
// would pass (0: now).
// Inline: the memory store's hot path runs it on every check, and inlined it keeps the
// state and the decision in registers instead of copying them through an Outcome.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline Outcome<TokenBucketState> TokenBucketCheck(
    const std::optional<TokenBucketState>& state, int64_t now_micros,
    const TokenBucketParams& params, const TokenBucketTimes& times, int64_t cost) {
  const double rate = params.refill_per_second;
  const double now = static_cast<double>(now_micros);
  const double fill_time = times.fill_micros;
  double empty_at = now - fill_time;  // a missing state is a full bucket
  if (state.has_value() && state->empty_at_micros > empty_at) empty_at = state->empty_at_micros;

  Outcome<TokenBucketState> out;
  out.state = state.value_or(TokenBucketState{empty_at});
  out.decision.limit = params.capacity;

  if (cost > params.capacity) {
    out.decision.allowed = false;
    out.decision.reason = DenyReason::kCostExceedsLimit;
  } else {
    const double cost_time = cost == 1 ? times.unit_micros : static_cast<double>(cost) * 1e6 / rate;
    const double next = empty_at + cost_time;
    if (next <= now) {
      out.decision.allowed = true;
      if (cost > 0) {
        empty_at = next;
        out.state = TokenBucketState{next};
        out.changed = true;
      } else if (const double one = empty_at + times.unit_micros; one > now) {
        // A peek: when a cost of 1 would pass.
        out.decision.retry_after_micros = CeilMicros(one - now);
      }
    } else {
      out.decision.allowed = false;
      out.decision.reason = DenyReason::kOverLimit;
      // A refused peek (the bucket is in debt) says when a cost of 1 would pass.
      out.decision.retry_after_micros =
          CeilMicros((cost == 0 ? empty_at + times.unit_micros : next) - now);
    }
  }
  SetRemaining(internal::WholeTokens(now, empty_at, times.tokens_per_micro, params.capacity),
               out.decision);
  out.decision.reset_after_micros = CeilMicros(empty_at + fill_time - now);
  out.expires_at_micros = now_micros + out.decision.reset_after_micros;
  return out;
}

// The same, computing the times itself.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline Outcome<TokenBucketState> TokenBucketCheck(
    const std::optional<TokenBucketState>& state, int64_t now_micros,
    const TokenBucketParams& params, int64_t cost) {
  return TokenBucketCheck(state, now_micros, params, TokenBucketTimesFor(params), cost);
}

// A charge: `cost` tokens consumed already (an LLM response's tokens), applied in full
// whatever the bucket holds, so it may go into debt (empty_at after now), which later checks
// wait out; at most kMaxDebtMicros of debt is kept. The decision is a peek at the bucket after
// it (Applied: allowed, with its remaining or debt and when a cost of 1 passes):
//   empty_at = max(state or -inf, now - fill_time)
//   empty_at = min(empty_at + cost * 1e6 / rate, now + kMaxDebtMicros)   (when cost > 0)
// REQUIRES: cost >= 0; `times` == TokenBucketTimesFor(params).
inline Outcome<TokenBucketState> TokenBucketCharge(const std::optional<TokenBucketState>& state,
                                                   int64_t now_micros,
                                                   const TokenBucketParams& params,
                                                   const TokenBucketTimes& times, int64_t cost) {
  if (cost <= 0) return Applied(TokenBucketCheck(state, now_micros, params, times, 0), false);
  const double now = static_cast<double>(now_micros);
  double empty_at = now - times.fill_micros;
  if (state.has_value() && state->empty_at_micros > empty_at) empty_at = state->empty_at_micros;
  empty_at = empty_at + static_cast<double>(cost) * 1e6 / params.refill_per_second;
  if (const double most = now + kMaxDebtMicros; empty_at > most) empty_at = most;
  return Applied(TokenBucketCheck(TokenBucketState{empty_at}, now_micros, params, times, 0), true);
}

// A refund: `tokens` given back (a reservation settled for less than it took), never beyond
// a full bucket, so a bucket that refilled since gets nothing back:
//   empty_at = max(max(state, now - fill_time) - tokens * 1e6 / rate, now - fill_time)
// A missing state (a full bucket) stays missing. The decision is a peek after it (Applied).
// REQUIRES: tokens >= 0; `times` == TokenBucketTimesFor(params).
inline Outcome<TokenBucketState> TokenBucketRefund(const std::optional<TokenBucketState>& state,
                                                   int64_t now_micros,
                                                   const TokenBucketParams& params,
                                                   const TokenBucketTimes& times, int64_t tokens) {
  const double now = static_cast<double>(now_micros);
  const double full = now - times.fill_micros;
  if (tokens <= 0 || !state.has_value() || !(state->empty_at_micros > full)) {
    return Applied(TokenBucketCheck(state, now_micros, params, times, 0), false);
  }
  double empty_at =
      state->empty_at_micros - static_cast<double>(tokens) * 1e6 / params.refill_per_second;
  if (empty_at < full) empty_at = full;
  return Applied(TokenBucketCheck(TokenBucketState{empty_at}, now_micros, params, times, 0), true);
}

// Settles a reservation of `reserved` tokens at the actual `cost`: a refund of the difference
// when smaller, a charge of the extra when larger (nothing changes when equal).
// REQUIRES: reserved >= 0, cost >= 0; `times` == TokenBucketTimesFor(params).
inline Outcome<TokenBucketState> TokenBucketSettle(const std::optional<TokenBucketState>& state,
                                                   int64_t now_micros,
                                                   const TokenBucketParams& params,
                                                   const TokenBucketTimes& times, int64_t reserved,
                                                   int64_t cost) {
  return cost < reserved ? TokenBucketRefund(state, now_micros, params, times, reserved - cost)
                         : TokenBucketCharge(state, now_micros, params, times, cost - reserved);
}

}  // namespace tollgate::algorithm

#endif  // TOLLGATE_SRC_ALGORITHM_TOKEN_BUCKET_H_
