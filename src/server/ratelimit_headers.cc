// Copyright tollgate authors.
#include "src/server/ratelimit_headers.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace tollgate::server {
namespace {

// Ceiling of a positive double to an int64, saturating instead of overflowing.
int64_t SaturatingCeil(double value) {
  if (!(value > 0)) return 0;
  if (value >= static_cast<double>(std::numeric_limits<int64_t>::max())) {
    return std::numeric_limits<int64_t>::max();
  }
  return static_cast<int64_t>(std::ceil(value));
}

}  // namespace

int64_t CeilMillis(int64_t micros) { return micros <= 0 ? 0 : (micros - 1) / 1000 + 1; }

int64_t CeilSeconds(int64_t micros) { return micros <= 0 ? 0 : (micros - 1) / 1'000'000 + 1; }

const LimitNumbers& DecidingNumbers(const Limit& limit, const Decision& decision) {
  if (decision.source == DecisionSource::kFallback &&
      limit.on_store_failure == FailureMode::kLocal && limit.local.has_value()) {
    return *limit.local;
  }
  return limit.numbers;
}

std::string PolicyItem(const LimitNumbers& numbers) {
  int64_t quota = numbers.MaxCost();
  int64_t window_seconds = 0;
  if (numbers.algorithm == Algorithm::kTokenBucket) {
    window_seconds =
        numbers.refill_per_second > 0
            ? SaturatingCeil(static_cast<double>(numbers.capacity) / numbers.refill_per_second)
            : 0;
  } else {
    window_seconds = CeilSeconds(numbers.window_micros);
  }
  return absl::StrCat(quota, ";w=", std::max<int64_t>(window_seconds, 1));
}

std::string RateLimitField(const Decision& decision) {
  return absl::StrCat("limit=", decision.limit,
                      ", remaining=", std::max<int64_t>(decision.remaining, 0),
                      ", reset=", CeilSeconds(decision.reset_after_micros));
}

std::optional<int64_t> RetryAfterSeconds(const Decision& decision) {
  if (decision.allowed || decision.retry_after_micros <= 0) return std::nullopt;
  return std::max<int64_t>(CeilSeconds(decision.retry_after_micros), 1);
}

}  // namespace tollgate::server
