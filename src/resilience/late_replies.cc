// Copyright tollgate authors.
#include "src/resilience/late_replies.h"

#include <utility>
#include <vector>

namespace tollgate::resilience {

void LateReplies::Admit(const std::vector<CheckItem>& consumed, int64_t instances,
                        const std::shared_ptr<PendingCall>& hold) {
  const int64_t now_micros = clock_->NowMicros();
  std::vector<Admitted> admitted;
  admitted.reserve(consumed.size());
  for (const CheckItem& item : consumed) {
    // A lease taken locally is the fallback's own: it expires there, nothing to reconcile.
    if (item.cost <= 0 || item.limit->numbers.algorithm == Algorithm::kConcurrency) continue;
    admitted.push_back(Admitted{limits_.Get(*item.limit, item.limit->numbers), item.key, item.cost,
                                IsConditional(item.op)});
  }
  if (admitted.empty()) return;
  if (hold != nullptr) {
    absl::MutexLock lock(&hold->settle_mutex);
    if (!hold->reply_seen) {
      hold->held = true;
      hold->held_items = std::move(admitted);
      hold->held_at_micros = now_micros;
      hold->held_instances = instances;
      return;
    }
    // The store's reply came first: keep what it did not apply.
    std::erase_if(admitted, [&](const Admitted& item) {
      return item.conditional ? hold->reply_consumed : hold->reply_answered;
    });
    if (admitted.empty()) {
      settled_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  reconciler_.Record(admitted, now_micros, instances);
}

void LateReplies::Settle(PendingCall& call,
                         const absl::StatusOr<std::vector<Decision>>& decisions) {
  // Whether the store applied the checks (the batch passed there); it applied the charges
  // whenever it answered.
  const bool answered = decisions.ok();
  bool consumed = answered;
  if (answered) {
    for (size_t i = 0; i < decisions->size(); ++i) {
      const bool conditional = i >= call.ops.size() || IsConditional(call.ops[i]);
      consumed &= (*decisions)[i].allowed || !conditional;
    }
  }
  std::vector<Admitted> held;
  int64_t held_at = 0;
  int64_t held_instances = 1;
  {
    absl::MutexLock lock(&call.settle_mutex);
    call.reply_seen = true;
    call.reply_consumed = consumed;
    call.reply_answered = answered;
    if (!call.held) {
      late_replies_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    call.held = false;
    held.swap(call.held_items);
    held_at = call.held_at_micros;
    held_instances = call.held_instances;
  }
  // What the store did not apply is recorded for reconciliation.
  std::erase_if(held, [&](const Admitted& item) { return item.conditional ? consumed : answered; });
  if (held.empty()) {
    settled_.fetch_add(1, std::memory_order_relaxed);
  } else {
    reconciler_.Record(held, held_at, held_instances);
  }
  // Counted after the record: once late_replies matches deadlines_missed, all that the late
  // replies leave for reconciliation is recorded.
  late_replies_.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace tollgate::resilience
