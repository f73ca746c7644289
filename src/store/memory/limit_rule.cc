// Copyright tollgate authors.
#include "src/store/memory/limit_rule.h"

#include <optional>
#include <variant>

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

Step Decide(const LimitRule& rule, const AnyState* state, int64_t now_micros, int64_t cost) {
  return std::visit(
      [&](const auto& r) {
        using State = typename std::decay_t<decltype(r)>::State;
        const State* held = state != nullptr ? std::get_if<State>(state) : nullptr;
        algorithm::Outcome<State> outcome =
            r.Check(held != nullptr ? std::optional<State>(*held) : std::nullopt, now_micros, cost);
        outcome.decision.source = DecisionSource::kMemory;
        return Step{outcome.decision, outcome.state, outcome.changed, outcome.expires_at_micros};
      },
      rule);
}

}  // namespace tollgate::memory
