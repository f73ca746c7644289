// Copyright tollgate authors. Calls the deadline answered while their store request was still
// out, and what the store's late reply settles.
#ifndef TOLLGATE_SRC_RESILIENCE_LATE_REPLIES_H_
#define TOLLGATE_SRC_RESILIENCE_LATE_REPLIES_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "src/resilience/limit_copies.h"
#include "src/resilience/reconciler.h"
#include "tollgate/clock.h"
#include "tollgate/decision.h"
#include "tollgate/store.h"

namespace tollgate::resilience {

// One call in flight: answered exactly once, by the store or by the deadline. When the
// deadline answers it from a failure policy that admits, what was admitted is held here
// until the store's late reply settles it (LateReplies).
struct PendingCall {
  std::atomic<bool> answered{false};
  CheckCallback done;
  std::vector<CheckItem> items;  // kept for the fallback answer
  bool probe = false;
  // Each item's op, for a late reply (`items` is moved to the fallback by then), when the
  // batch has any op but kCheck; empty otherwise.
  std::vector<ItemOp> ops;

  absl::Mutex settle_mutex;
  bool reply_seen ABSL_GUARDED_BY(settle_mutex) = false;
  bool reply_consumed ABSL_GUARDED_BY(settle_mutex) = false;
  bool reply_answered ABSL_GUARDED_BY(settle_mutex) = false;
  bool held ABSL_GUARDED_BY(settle_mutex) = false;
  std::vector<Admitted> held_items ABSL_GUARDED_BY(settle_mutex);
  int64_t held_at_micros ABSL_GUARDED_BY(settle_mutex) = 0;
  int64_t held_instances ABSL_GUARDED_BY(settle_mutex) = 1;
};

// What fallback answers admitted, on its way to the reconciler: at once when no store request
// is out, else once the store's late reply says what it did not apply itself (consumed in
// the store, allowed, it is dropped; refused or failed, it is recorded). The store calls back
// exactly once, so nothing stays held. Thread-safe.
class LateReplies {
 public:
  LateReplies(Clock* clock, Reconciler& reconciler) : clock_(clock), reconciler_(reconciler) {}

  // `consumed`: what a fallback answer with `instances` live consumed. `hold`: the call
  // whose store request is still out (its deadline passed); nullptr: none is.
  void Admit(const std::vector<CheckItem>& consumed, int64_t instances,
             const std::shared_ptr<PendingCall>& hold);

  // The store's reply to `call` came after the deadline had answered it.
  void Settle(PendingCall& call, const absl::StatusOr<std::vector<Decision>>& decisions);

  // Late replies, and those that left nothing to reconcile.
  int64_t late_replies() const { return late_replies_.load(); }
  int64_t settled() const { return settled_.load(); }

 private:
  Clock* const clock_;
  Reconciler& reconciler_;
  LimitCopies limits_;
  std::atomic<int64_t> late_replies_{0};
  std::atomic<int64_t> settled_{0};
};

}  // namespace tollgate::resilience

#endif  // TOLLGATE_SRC_RESILIENCE_LATE_REPLIES_H_
