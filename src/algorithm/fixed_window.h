// Copyright tollgate authors. Fixed window counter as a pure function.
//
// Windows are aligned to the Unix epoch: window index = floor(now / window). A state from
// an earlier window counts as zero. `count + cost <= limit` passes and adds `cost`.
#ifndef TOLLGATE_SRC_ALGORITHM_FIXED_WINDOW_H_
#define TOLLGATE_SRC_ALGORITHM_FIXED_WINDOW_H_

#include <cstdint>
#include <optional>

#include "absl/base/attributes.h"
#include "src/algorithm/outcome.h"

namespace tollgate::algorithm {

struct WindowParams {
  // REQUIRES: limit >= 1, window_micros >= 1.
  int64_t limit = 1;
  int64_t window_micros = 1'000'000;
};

struct FixedWindowState {
  int64_t window_index = 0;
  int64_t count = 0;
  bool operator==(const FixedWindowState&) const = default;
};

// Index of the window that contains `now_micros` (floor division; now may be negative).
// Inline, as are the checks: the memory store's hot path runs them on every check, and
// inlined they keep the state and the decision in registers instead of an Outcome in memory.
inline int64_t WindowIndex(int64_t now_micros, int64_t window_micros) {
  int64_t index = now_micros / window_micros;
  if (now_micros % window_micros < 0) --index;  // floor, not truncation
  return index;
}

// WindowIndex(now_micros, window_micros), given the index of a recent window: when now lies
// in that window or the next (nearly every check of a key in use), one multiplication and
// two comparisons replace a 64-bit integer division (docs/design/memory.md, step 6). Any other
// `recent_index` (stale, from the future, from a limit that was redefined) falls back to the
// division; the result is the same either way.
inline int64_t WindowIndexNear(int64_t now_micros, int64_t window_micros, int64_t recent_index) {
  int64_t start = 0;
  if (!__builtin_mul_overflow(recent_index, window_micros, &start) && now_micros >= start) {
    // now - start cannot overflow: start <= now.
    const uint64_t elapsed = static_cast<uint64_t>(now_micros) - static_cast<uint64_t>(start);
    const auto window = static_cast<uint64_t>(window_micros);
    if (elapsed < window) return recent_index;
    if (elapsed - window < window) return recent_index + 1;
  }
  return WindowIndex(now_micros, window_micros);
}

// The index of the window containing `now_micros`, using `state`'s window as the hint.
template <typename State>
inline int64_t WindowIndexFor(const std::optional<State>& state, int64_t now_micros,
                              int64_t window_micros) {
  return state.has_value() ? WindowIndexNear(now_micros, window_micros, state->window_index)
                           : WindowIndex(now_micros, window_micros);
}

// REQUIRES: cost >= 0. A cost of 0 (a peek) consumes nothing; it is allowed unless the
// window is in debt (past its limit, after a charge), and its retry_after_micros says when a
// cost of 1 would pass (0: now).
ABSL_ATTRIBUTE_ALWAYS_INLINE inline Outcome<FixedWindowState> FixedWindowCheck(
    const std::optional<FixedWindowState>& state, int64_t now_micros, const WindowParams& params,
    int64_t cost) {
  int64_t index = WindowIndexFor(state, now_micros, params.window_micros);
  // Time going backwards counts as no time passing: a state from a later window than now's
  // is still the current one (else a clock step back would reopen a spent window).
  if (state.has_value() && state->window_index > index) index = state->window_index;
  const int64_t count = (state.has_value() && state->window_index == index) ? state->count : 0;
  const int64_t window_end = (index + 1) * params.window_micros;

  Outcome<FixedWindowState> out;
  out.state = state.value_or(FixedWindowState{index, 0});
  out.decision.limit = params.limit;
  out.decision.reset_after_micros = window_end - now_micros;
  out.expires_at_micros = window_end;

  int64_t after = count;
  if (cost > params.limit) {
    out.decision.reason = DenyReason::kCostExceedsLimit;
  } else if (count + cost <= params.limit) {
    out.decision.allowed = true;
    if (cost > 0) {
      after = count + cost;
      out.state = FixedWindowState{index, after};
      out.changed = true;
    } else if (count + 1 > params.limit) {
      // A peek on a spent window: a cost of 1 passes when the next window starts.
      out.decision.retry_after_micros = window_end - now_micros;
    }
  } else {
    out.decision.reason = DenyReason::kOverLimit;
    // The next window starts empty and cost <= limit, so it passes there.
    out.decision.retry_after_micros = window_end - now_micros;
  }
  SetRemaining(params.limit - after, out.decision);
  return out;
}

// The index of the window now falls in, given `state`, as FixedWindowCheck computes it (time
// going backwards counts as no time passing).
template <typename State>
inline int64_t CurrentWindowIndex(const std::optional<State>& state, int64_t now_micros,
                                  int64_t window_micros) {
  int64_t index = WindowIndexFor(state, now_micros, window_micros);
  if (state.has_value() && state->window_index > index) index = state->window_index;
  return index;
}

// A charge: `cost` consumed already, added to the current window in full whatever it holds,
// so the window may pass its limit (a debt the next window forgives). The decision is a peek
// after it (Applied). REQUIRES: cost >= 0.
inline Outcome<FixedWindowState> FixedWindowCharge(const std::optional<FixedWindowState>& state,
                                                   int64_t now_micros, const WindowParams& params,
                                                   int64_t cost) {
  if (cost <= 0) return Applied(FixedWindowCheck(state, now_micros, params, 0), false);
  const int64_t index = CurrentWindowIndex(state, now_micros, params.window_micros);
  const int64_t count = (state.has_value() && state->window_index == index) ? state->count : 0;
  return Applied(FixedWindowCheck(FixedWindowState{index, count + cost}, now_micros, params, 0),
                 true);
}

// A refund: `units` given back to the window that contains `at_micros` (when a reservation
// took them), only while that window is the current one, never below 0. The decision is a
// peek after it (Applied). REQUIRES: units >= 0.
inline Outcome<FixedWindowState> FixedWindowRefund(const std::optional<FixedWindowState>& state,
                                                   int64_t now_micros, const WindowParams& params,
                                                   int64_t units, int64_t at_micros) {
  const int64_t index = CurrentWindowIndex(state, now_micros, params.window_micros);
  if (units <= 0 || !state.has_value() || state->window_index != index ||
      WindowIndex(at_micros, params.window_micros) != index || state->count <= 0) {
    return Applied(FixedWindowCheck(state, now_micros, params, 0), false);
  }
  const int64_t count = state->count > units ? state->count - units : 0;
  return Applied(FixedWindowCheck(FixedWindowState{index, count}, now_micros, params, 0), true);
}

// Settles a reservation of `reserved` units taken at `reserved_at_micros` at the actual
// `cost`: a refund of the difference when smaller, a charge of the extra when larger.
// REQUIRES: reserved >= 0, cost >= 0.
inline Outcome<FixedWindowState> FixedWindowSettle(const std::optional<FixedWindowState>& state,
                                                   int64_t now_micros, const WindowParams& params,
                                                   int64_t reserved, int64_t reserved_at_micros,
                                                   int64_t cost) {
  return cost < reserved
             ? FixedWindowRefund(state, now_micros, params, reserved - cost, reserved_at_micros)
             : FixedWindowCharge(state, now_micros, params, cost - reserved);
}

}  // namespace tollgate::algorithm

#endif  // TOLLGATE_SRC_ALGORITHM_FIXED_WINDOW_H_
