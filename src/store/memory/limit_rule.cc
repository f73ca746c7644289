// Copyright tollgate authors.
#include "src/store/memory/limit_rule.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tollgate::memory {
absl::StatusOr<LimitRule> RuleFor(const Limit& limit) {
  if (absl::Status valid = ValidateLimit(limit); !valid.ok()) return valid;
  const LimitNumbers& n = limit.numbers;
  const algorithm::WindowParams window{n.limit, n.window_micros};
  switch (n.algorithm) {
    case Algorithm::kTokenBucket: {
      const algorithm::TokenBucketParams params{n.capacity, n.refill_per_second};
      return TokenBucketRule{params, algorithm::TokenBucketTimesFor(params)};
    }
    case Algorithm::kFixedWindow:
      return FixedWindowRule{window};
    case Algorithm::kSlidingWindow:
      return SlidingWindowRule{window, algorithm::PerWindow(window)};
    case Algorithm::kConcurrency:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "limit \"", limit.name, "\" is a concurrency limit: it takes leases, not rate checks"));
}

absl::StatusOr<ItemRule> ItemRuleFor(const CheckItem& item) {
  if (item.limit == nullptr) return absl::InvalidArgumentError("check item without a limit");
  if (item.key.empty()) return absl::InvalidArgumentError("empty key");
  if (item.cost < 0) return absl::InvalidArgumentError("negative cost");
  const Limit& limit = *item.limit;
  const bool lease_op = item.op == ItemOp::kRelease || item.op == ItemOp::kRenew;
  const bool needs_id = item.op != ItemOp::kCheck && item.op != ItemOp::kCharge;
  ItemRule rule;
  if (limit.numbers.algorithm == Algorithm::kConcurrency) {
    if (absl::Status valid = ValidateLimit(limit); !valid.ok()) return valid;
    if (!lease_op && item.op != ItemOp::kCheck) {
      return absl::InvalidArgumentError(
          absl::StrCat("limit \"", limit.name,
                       "\" is a concurrency limit: it takes leases, not charges or "
                       "reservations"));
    }
    if (item.op == ItemOp::kCheck && item.cost > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "limit \"", limit.name, "\": a lease takes one slot (cost 1, or 0 to peek)"));
    }
    if ((lease_op || item.cost > 0) && item.id.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("limit \"", limit.name, "\": a lease needs an id"));
    }
    rule.concurrency = true;
    rule.leases = algorithm::ConcurrencyParams{limit.numbers.limit, limit.numbers.window_micros};
    return rule;
  }
  if (lease_op) {
    return absl::InvalidArgumentError(
        absl::StrCat("limit \"", limit.name, "\" is not a concurrency limit: it holds no leases"));
  }
  if (needs_id && item.id.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("limit \"", limit.name, "\": a reservation needs an id"));
  }
  absl::StatusOr<LimitRule> rate = RuleFor(limit);
  if (!rate.ok()) return std::move(rate).status();
  rule.rate = *rate;
  return rule;
}

}  // namespace tollgate::memory
