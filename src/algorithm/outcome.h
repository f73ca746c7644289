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

}  // namespace tollgate::algorithm

#endif  // TOLLGATE_SRC_ALGORITHM_OUTCOME_H_
