// Copyright tollgate authors.
#include "src/resilience/fallback_policy.h"

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "src/algorithm/share.h"
#include "src/core/batch.h"

namespace tollgate::resilience {

void FallbackPolicy::Answer(std::vector<CheckItem> items, int64_t instances,
                            absl::FunctionRef<void(const std::vector<CheckItem>&)> consumed,
                            CheckCallback done) {
  bool any_fail_closed = false;
  // Keeps the substituted limits alive until the (inline) memory store has answered.
  std::vector<std::shared_ptr<const Limit>> substitutes;
  substitutes.reserve(items.size());
  for (CheckItem& item : items) {
    if (item.limit->on_store_failure == FailureMode::kFailClosed) any_fail_closed = true;
    substitutes.push_back(Substitute(*item.limit, instances));
  }
  std::vector<CheckItem> local_items;
  local_items.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    CheckItem local{substitutes[i].get(), items[i].key, items[i].cost};
    local.shadow = items[i].shadow;
    local.op = items[i].op;
    local.id = items[i].id;
    // With a fail_closed limit in the batch no check may consume: they only peek.
    if (any_fail_closed && IsConditional(local.op)) {
      local.cost = 0;
      local.op = ItemOp::kCheck;
      local.id.clear();
    }
    local_items.push_back(std::move(local));
  }
  auto answer = [&](absl::StatusOr<std::vector<Decision>> decisions) {
    if (!decisions.ok()) {
      std::move(done)(decisions.status());
      return;
    }
    const bool batch_allowed = !any_fail_closed && internal::BatchAllowed(items, *decisions);
    // What the fallback consumed: the checks of a batch it admitted (a refused shadow item
    // took nothing), and every charge.
    std::vector<CheckItem> taken;
    for (size_t i = 0; i < items.size(); ++i) {
      const bool conditional = IsConditional(items[i].op);
      if ((conditional && batch_allowed && (*decisions)[i].allowed) ||
          items[i].op == ItemOp::kCharge) {
        taken.push_back(items[i]);
      }
    }
    consumed(taken);
    for (size_t i = 0; i < decisions->size(); ++i) {
      const ItemOp op = items[i].op;
      if ((op == ItemOp::kSettle || op == ItemOp::kRelease || op == ItemOp::kRenew) &&
          (*decisions)[i].reason == DenyReason::kNotFound) {
        std::move(done)(absl::UnavailableError(
            absl::StrCat("the store is unavailable: cannot settle, release or renew for limit '",
                         items[i].limit->name, "' now; retry")));
        return;
      }
    }
    for (size_t i = 0; i < decisions->size(); ++i) {
      Decision& decision = (*decisions)[i];
      decision.source = DecisionSource::kFallback;
      if (items[i].limit->on_store_failure == FailureMode::kFailClosed &&
          IsConditional(items[i].op)) {
        decision.allowed = false;
        decision.reason = DenyReason::kStoreUnavailable;
        decision.limit = items[i].limit->numbers.MaxCost();
        decision.remaining = 0;
        // The outage's wait, not the window's: nothing is known of the shared state until the
        // store answers, which may be at the next probe.
        decision.retry_after_micros = fail_closed_retry_after_micros_;
        decision.reset_after_micros = decision.retry_after_micros;
      }
    }
    std::move(done)(std::move(decisions));
  };
  store_->ApplyAsync(std::move(local_items), answer);
}

std::shared_ptr<const Limit> FallbackPolicy::Substitute(const Limit& limit, int64_t instances) {
  const LimitNumbers numbers =
      limit.on_store_failure == FailureMode::kLocal && limit.local
          ? *limit.local
          : algorithm::FallbackNumbers(limit.numbers, shares_.Weights(limit, instances));
  return substitutes_.Get(limit, numbers);
}

}  // namespace tollgate::resilience
