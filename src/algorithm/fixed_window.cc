// Copyright tollgate authors.
#include "src/algorithm/fixed_window.h"

namespace tollgate::algorithm {

int64_t WindowIndex(int64_t now_micros, int64_t window_micros) {
  int64_t index = now_micros / window_micros;
  if (now_micros % window_micros < 0) --index;  // floor, not truncation
  return index;
}

Outcome<FixedWindowState> FixedWindowCheck(const std::optional<FixedWindowState>& state,
                                           int64_t now_micros, const WindowParams& params,
                                           int64_t cost) {
  int64_t index = WindowIndex(now_micros, params.window_micros);
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
    }
  } else {
    out.decision.reason = DenyReason::kOverLimit;
    // The next window starts empty and cost <= limit, so it passes there.
    out.decision.retry_after_micros = window_end - now_micros;
  }
  out.decision.remaining = params.limit - after;
  return out;
}

}  // namespace tollgate::algorithm
