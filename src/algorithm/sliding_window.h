// Copyright tollgate authors. Sliding window counter (two-counter approximation).
//
// Counts are kept per epoch-aligned window. At elapsed time `e` into the current window,
// the estimated use over the last `window` is
//   estimate = previous * ((window - e) * (1 / window)) + current
// (the previous window's count weighted by how much of it the sliding window still
// overlaps, assuming its requests were spread evenly). A check passes when
// `estimate + cost <= limit`.
//
// Bounds (what tests assert): every epoch-aligned window admits at most `limit`, and any
// interval of length `window` admits less than 2 * limit (the worst case is a previous
// window whose requests all came at its very end). docs/sync.md cites what Cloudflare
// measured of the approximation's error on real traffic.
#ifndef TOLLGATE_SRC_ALGORITHM_SLIDING_WINDOW_H_
#define TOLLGATE_SRC_ALGORITHM_SLIDING_WINDOW_H_

#include <cstdint>
#include <optional>

#include "absl/base/attributes.h"
#include "src/algorithm/fixed_window.h"
#include "src/algorithm/outcome.h"

namespace tollgate::algorithm {

struct SlidingWindowState {
  int64_t window_index = 0;
  int64_t current = 0;
  int64_t previous = 0;
  bool operator==(const SlidingWindowState&) const = default;
};

namespace internal {

// previous * ((window - elapsed) * (1 / window)) + current, in this order (the Lua script
// computes the same expression), where `per_window` is 1 / window. A multiplication by the
// reciprocal instead of a division by the window: the reciprocal depends on the limit alone,
// so its division runs while the state is looked up, not after the clock read.
inline double Estimate(int64_t previous, int64_t current, int64_t elapsed, int64_t window,
                       double per_window) {
  const double weight = static_cast<double>(window - elapsed) * per_window;
  return static_cast<double>(previous) * weight + static_cast<double>(current);
}

// How long until a cost of `cost` passes, `elapsed` into window whose count is `current`,
// the one before holding `previous`, when it does not pass now: in this window once the
// previous window's weight has shrunk enough, else in the next one, where this window's count
// becomes the weighted previous. REQUIRES: 0 < cost <= limit, and cost does not pass now.
inline int64_t RetryAfter(int64_t previous, int64_t current, int64_t cost, int64_t limit,
                          int64_t elapsed, int64_t window) {
  const double w = static_cast<double>(window);
  if (current + cost <= limit) {
    const double needed_elapsed =
        w - static_cast<double>(limit - current - cost) * w / static_cast<double>(previous);
    return CeilMicros(needed_elapsed - static_cast<double>(elapsed)) + 1;
  }
  const double needed_elapsed =
      w - static_cast<double>(limit - cost) * w / static_cast<double>(current);
  return (window - elapsed) + CeilMicros(needed_elapsed) + 1;
}

}  // namespace internal

// 1 / window, as every check computes it: what a store that checks one limit over and over
// may compute once (the memory store's prepared limits do) and pass to SlidingWindowCheck.
inline double PerWindow(const WindowParams& params) {
  return 1 / static_cast<double>(params.window_micros);
}

// The estimate SlidingWindowCheck compares with the limit: previous * weight + current,
// `elapsed_micros` into the current window (clamped to the window).
inline double SlidingWindowEstimate(int64_t previous, int64_t current, int64_t elapsed_micros,
                                    const WindowParams& params) {
  const int64_t elapsed = elapsed_micros < 0                      ? 0
                          : elapsed_micros > params.window_micros ? params.window_micros
                                                                  : elapsed_micros;
  return internal::Estimate(previous, current, elapsed, params.window_micros, PerWindow(params));
}

// REQUIRES: cost >= 0; per_window == PerWindow(params). A cost of 0 (a peek) consumes
// nothing; it is allowed unless the estimate is past the limit (in debt, after a charge), and
// its retry_after_micros says when a cost of 1 would pass (0: now). Inline, as the token
// bucket's check, for the memory store's hot path.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline Outcome<SlidingWindowState> SlidingWindowCheck(
    const std::optional<SlidingWindowState>& state, int64_t now_micros, const WindowParams& params,
    double per_window, int64_t cost) {
  const int64_t window = params.window_micros;
  const int64_t limit = params.limit;
  int64_t index = WindowIndexFor(state, now_micros, window);
  // Time going backwards counts as no time passing: a state from a later window than now's
  // is still the current one (else a clock step back would forget its counts).
  if (state.has_value() && state->window_index > index) index = state->window_index;
  int64_t current = 0;
  int64_t previous = 0;
  if (state.has_value()) {
    if (state->window_index == index) {
      current = state->current;
      previous = state->previous;
    } else if (state->window_index == index - 1) {
      previous = state->current;
    }
  }
  // Negative only when the clock went back before the state's window; the estimate then
  // uses the window's start (no time passed), while retry_after and reset_after stay
  // measured from the caller's now.
  const int64_t elapsed = now_micros - index * window;
  const int64_t estimate_elapsed = elapsed > 0 ? elapsed : 0;

  Outcome<SlidingWindowState> out;
  out.state = state.value_or(SlidingWindowState{index, 0, 0});
  out.decision.limit = limit;

  const double estimate =
      internal::Estimate(previous, current, estimate_elapsed, window, per_window);
  if (cost > limit) {
    out.decision.reason = DenyReason::kCostExceedsLimit;
  } else if (estimate + static_cast<double>(cost) <= static_cast<double>(limit)) {
    out.decision.allowed = true;
    if (cost > 0) {
      current += cost;
      out.state = SlidingWindowState{index, current, previous};
      out.changed = true;
    } else if (estimate + 1 > static_cast<double>(limit)) {
      // A peek: when a cost of 1 would pass.
      out.decision.retry_after_micros =
          internal::RetryAfter(previous, current, 1, limit, elapsed, window);
    }
  } else {
    out.decision.reason = DenyReason::kOverLimit;
    // A refused peek (the estimate is past the limit) says when a cost of 1 would pass.
    out.decision.retry_after_micros =
        internal::RetryAfter(previous, current, cost == 0 ? 1 : cost, limit, elapsed, window);
  }

  SetRemaining(
      FloorSigned(static_cast<double>(limit) -
                  internal::Estimate(previous, current, estimate_elapsed, window, per_window) +
                  1e-6),
      out.decision);
  if (current > 0) {
    out.decision.reset_after_micros = (index + 2) * window - now_micros;
  } else if (previous > 0) {
    out.decision.reset_after_micros = (index + 1) * window - now_micros;
  }
  out.expires_at_micros = now_micros + out.decision.reset_after_micros;
  return out;
}

// The same, computing 1 / window itself.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline Outcome<SlidingWindowState> SlidingWindowCheck(
    const std::optional<SlidingWindowState>& state, int64_t now_micros, const WindowParams& params,
    int64_t cost) {
  return SlidingWindowCheck(state, now_micros, params, PerWindow(params), cost);
}

// The counts of the current window (the one `now_micros` falls in, time going backwards
// counting as no time passing) and of the one before it, from `state`.
struct SlidingCounts {
  int64_t index = 0;
  int64_t current = 0;
  int64_t previous = 0;
};
inline SlidingCounts CurrentSlidingCounts(const std::optional<SlidingWindowState>& state,
                                          int64_t now_micros, int64_t window_micros) {
  SlidingCounts counts;
  counts.index = CurrentWindowIndex(state, now_micros, window_micros);
  if (state.has_value()) {
    if (state->window_index == counts.index) {
      counts.current = state->current;
      counts.previous = state->previous;
    } else if (state->window_index == counts.index - 1) {
      counts.previous = state->current;
    }
  }
  return counts;
}

// A charge: `cost` consumed already, added to the current window's count in full, so the
// estimate may pass the limit (a debt that weighs on until the window has slid past it). The
// decision is a peek after it (Applied). REQUIRES: cost >= 0.
inline Outcome<SlidingWindowState> SlidingWindowCharge(
    const std::optional<SlidingWindowState>& state, int64_t now_micros, const WindowParams& params,
    int64_t cost) {
  if (cost <= 0) return Applied(SlidingWindowCheck(state, now_micros, params, 0), false);
  const SlidingCounts counts = CurrentSlidingCounts(state, now_micros, params.window_micros);
  return Applied(
      SlidingWindowCheck(SlidingWindowState{counts.index, counts.current + cost, counts.previous},
                         now_micros, params, 0),
      true);
}

// A refund: `units` given back to the count of the window that contains `at_micros`, while
// that window still weighs in the estimate (the current one or the one before), never below
// 0. The decision is a peek after it (Applied). REQUIRES: units >= 0.
inline Outcome<SlidingWindowState> SlidingWindowRefund(
    const std::optional<SlidingWindowState>& state, int64_t now_micros, const WindowParams& params,
    int64_t units, int64_t at_micros) {
  SlidingCounts counts = CurrentSlidingCounts(state, now_micros, params.window_micros);
  const int64_t at_index = WindowIndex(at_micros, params.window_micros);
  int64_t* count = at_index == counts.index       ? &counts.current
                   : at_index == counts.index - 1 ? &counts.previous
                                                  : nullptr;
  if (units <= 0 || count == nullptr || *count <= 0) {
    return Applied(SlidingWindowCheck(state, now_micros, params, 0), false);
  }
  *count = *count > units ? *count - units : 0;
  return Applied(
      SlidingWindowCheck(SlidingWindowState{counts.index, counts.current, counts.previous},
                         now_micros, params, 0),
      true);
}

// Settles a reservation of `reserved` units taken at `reserved_at_micros` at the actual
// `cost`: a refund of the difference when smaller, a charge of the extra when larger.
// REQUIRES: reserved >= 0, cost >= 0.
inline Outcome<SlidingWindowState> SlidingWindowSettle(
    const std::optional<SlidingWindowState>& state, int64_t now_micros, const WindowParams& params,
    int64_t reserved, int64_t reserved_at_micros, int64_t cost) {
  return cost < reserved
             ? SlidingWindowRefund(state, now_micros, params, reserved - cost, reserved_at_micros)
             : SlidingWindowCharge(state, now_micros, params, cost - reserved);
}

}  // namespace tollgate::algorithm

#endif  // TOLLGATE_SRC_ALGORITHM_SLIDING_WINDOW_H_
