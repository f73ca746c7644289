// Copyright tollgate authors.
#include "src/store/memory/limit_rule.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tollgate::memory {
namespace {

absl::Status InvalidNumbers(const Limit& limit) {
  return absl::InvalidArgumentError(absl::StrCat("limit \"", limit.name, "\" has invalid numbers"));
}

}  // namespace

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
    case Algorithm::kConcurrency:
      return absl::InvalidArgumentError(absl::StrCat(
          "limit \"", limit.name, "\" is a concurrency limit: it takes leases, not rate checks"));
  }
  return InvalidNumbers(limit);
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
    if (limit.numbers.limit < 1 || limit.numbers.window_micros < 1) return InvalidNumbers(limit);
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
