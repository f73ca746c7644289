// Copyright tollgate authors. What an algorithm step returns.
#ifndef TOLLGATE_SRC_ALGORITHM_OUTCOME_H_
#define TOLLGATE_SRC_ALGORITHM_OUTCOME_H_

#include <cmath>
#include <cstdint>

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

// Ceiling of a non-negative double to whole microseconds, as the Lua scripts do it.
// Inline: every decision calls it.
inline int64_t CeilMicros(double micros) {
  if (!(micros > 0)) return 0;
  // Durations beyond 2^62 µs (146,000 years; a slow refill of a huge capacity) are capped:
  // converting a double beyond int64 is undefined, and `now + duration` must not overflow.
  constexpr double kMaxMicros = 4'611'686'018'427'387'904.0;  // 2^62
  if (micros >= kMaxMicros) return static_cast<int64_t>(kMaxMicros);
  return static_cast<int64_t>(std::ceil(micros));
}

}  // namespace tollgate::algorithm

#endif  // TOLLGATE_SRC_ALGORITHM_OUTCOME_H_
