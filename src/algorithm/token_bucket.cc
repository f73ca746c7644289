// Copyright tollgate authors.
#include "src/algorithm/token_bucket.h"

#include <cmath>

namespace tollgate::algorithm {
namespace {

// Whole tokens held at `now` by a bucket that is empty at `empty_at`, rounded down. The
// small epsilon keeps 2.9999999997 (a double rounding artefact) reported as 3.
int64_t WholeTokens(double now, double empty_at, double rate, int64_t capacity) {
  double tokens = std::floor((now - empty_at) * rate / 1e6 + 1e-6);
  if (tokens < 0) return 0;
  if (tokens > static_cast<double>(capacity)) return capacity;
  return static_cast<int64_t>(tokens);
}

}  // namespace

Outcome<TokenBucketState> TokenBucketCheck(const std::optional<TokenBucketState>& state,
                                           int64_t now_micros, const TokenBucketParams& params,
                                           int64_t cost) {
  const double rate = params.refill_per_second;
  const double now = static_cast<double>(now_micros);
  const double fill_time = static_cast<double>(params.capacity) * 1e6 / rate;
  double empty_at = now - fill_time;  // a missing state is a full bucket
  if (state.has_value() && state->empty_at_micros > empty_at) empty_at = state->empty_at_micros;

  Outcome<TokenBucketState> out;
  out.state = state.value_or(TokenBucketState{empty_at});
  out.decision.limit = params.capacity;

  if (cost > params.capacity) {
    out.decision.allowed = false;
    out.decision.reason = DenyReason::kCostExceedsLimit;
  } else {
    const double next = empty_at + static_cast<double>(cost) * 1e6 / rate;
    if (next <= now) {
      out.decision.allowed = true;
      if (cost > 0) {
        empty_at = next;
        out.state = TokenBucketState{next};
        out.changed = true;
      }
    } else {
      out.decision.allowed = false;
      out.decision.reason = DenyReason::kOverLimit;
      out.decision.retry_after_micros = CeilMicros(next - now);
    }
  }
  out.decision.remaining = WholeTokens(now, empty_at, rate, params.capacity);
  out.decision.reset_after_micros = CeilMicros(empty_at + fill_time - now);
  out.expires_at_micros = now_micros + out.decision.reset_after_micros;
  return out;
}

}  // namespace tollgate::algorithm
