// Copyright tollgate authors. What an algorithm step returns.
#ifndef TOLLGATE_SRC_ALGORITHM_OUTCOME_H_
#define TOLLGATE_SRC_ALGORITHM_OUTCOME_H_

#include <cstdint>
#include <limits>

#include "tollgate/decision.h"

namespace tollgate::algorithm {

// The result of one pure algorithm step.
template <typename State>
struct Outcome {
  // `source` is left at its default; the store sets it.
  Decision decision;
  // The state to keep. Equal to the input state when nothing was consumed (a refusal or a
  // cost of 0), in which case `changed` is false and nothing needs to be written.
  State state;
  bool changed = false;
  // When the state stops mattering (a missing state means the same thing from then on):
  // the store may delete it at this time. Microseconds since the epoch.
  int64_t expires_at_micros = 0;
};

// Durations beyond 2^62 µs (146,000 years; a slow refill of a huge capacity) are capped:
// converting a double beyond int64 is undefined, and `now + duration` must not overflow.
inline constexpr double kMaxMicros = 4'611'686'018'427'387'904.0;  // 2^62

// Ceiling of a non-negative double to whole microseconds, as the Lua scripts do it
// (math.ceil): 0 for a value <= 0, kMaxMicros for one at or beyond it. Inline and without
// std::ceil, which without SSE4.1 is a call into libm: below 2^62 the truncated value is an
// exact double (at and above 2^52 every double is an integer already), so comparing it with
// `micros` tells exactly whether a fraction was cut off.
inline int64_t CeilMicros(double micros) {
  if (!(micros > 0)) return 0;
  if (micros >= kMaxMicros) return static_cast<int64_t>(kMaxMicros);
  const auto whole = static_cast<int64_t>(micros);
  return static_cast<double>(whole) < micros ? whole + 1 : whole;
}

// floor(x) as Lua's math.floor computes it, for a count that cannot be negative: 0 for
// x <= 0 (and NaN), INT64_MAX at and beyond 2^63 (where a conversion would be undefined).
// Exact, for the reason given at CeilMicros.
inline int64_t FloorAtLeastZero(double x) {
  if (!(x > 0)) return 0;
  if (x >= 9'223'372'036'854'775'808.0) return std::numeric_limits<int64_t>::max();  // 2^63
  return static_cast<int64_t>(x);  // truncation is floor for x >= 0
}

// floor(x) as Lua's math.floor computes it, negative values included, clamped to
// [-2^62, 2^62] (a count of whole units; -x of a negative result is a debt).
inline int64_t FloorSigned(double x) {
  if (x >= kMaxMicros) return static_cast<int64_t>(kMaxMicros);
  if (!(x > -kMaxMicros)) return -static_cast<int64_t>(kMaxMicros);  // NaN too
  const auto whole = static_cast<int64_t>(x);  // truncation toward zero, exact below 2^62
  return static_cast<double>(whole) > x ? whole - 1 : whole;
}

// What a step leaves of a limit in whole units, signed: `units` >= 0 is what is left, a
// negative one is a debt (units owed beyond zero, after a charge). Sets `remaining` and `debt`
// of `decision`.
inline void SetRemaining(int64_t units, Decision& decision) {
  decision.remaining = units > 0 ? units : 0;
  decision.debt = units < 0 ? -units : 0;
}

// The longest debt a charge may leave a token bucket in: 2^52 us (about 142 years). A charge
// beyond it is applied up to it, so every time stays an exact double and every TTL sane.
inline constexpr double kMaxDebtMicros = 4'503'599'627'370'496.0;  // 2^52

// A step that applies, whatever the limit has left (a charge, a refund): `outcome`, the
// answer of a peek (cost 0) at the new state, marked allowed. It keeps what the peek says of
// the limit, its debt and when a cost of 1 passes.
template <typename State>
Outcome<State> Applied(Outcome<State> outcome, bool changed) {
  outcome.decision.allowed = true;
  outcome.decision.reason = DenyReason::kNone;
  outcome.changed = changed;
  return outcome;
}

}  // namespace tollgate::algorithm

#endif  // TOLLGATE_SRC_ALGORITHM_OUTCOME_H_
