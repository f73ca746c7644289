// Copyright tollgate authors.
#include "src/store/memory/limit_rule.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tollgate::memory {

absl::StatusOr<LimitRule> RuleFor(const Limit& limit) {
  const LimitNumbers& n = limit.numbers;
  const algorithm::WindowParams window{n.limit, n.window_micros};
  const bool window_valid = n.limit >= 1 && n.window_micros >= 1;
  switch (n.algorithm) {
    case Algorithm::kTokenBucket:
      if (n.capacity >= 1 && n.refill_per_second > 0 && n.refill_per_second < 1e300) {
        const algorithm::TokenBucketParams params{n.capacity, n.refill_per_second};
        return TokenBucketRule{params, algorithm::TokenBucketTimesFor(params)};
      }
      break;
    case Algorithm::kFixedWindow:
      if (window_valid) return FixedWindowRule{window};
      break;
    case Algorithm::kSlidingWindow:
      if (window_valid) return SlidingWindowRule{window, algorithm::PerWindow(window)};
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat("limit \"", limit.name, "\" has invalid numbers"));
}

}  // namespace tollgate::memory
