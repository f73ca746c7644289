// Copyright tollgate authors. What an algorithm step returns.
#ifndef TOLLGATE_SRC_ALGORITHM_OUTCOME_H_
#define TOLLGATE_SRC_ALGORITHM_OUTCOME_H_

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
int64_t CeilMicros(double micros);

}  // namespace tollgate::algorithm

#endif  // TOLLGATE_SRC_ALGORITHM_OUTCOME_H_
