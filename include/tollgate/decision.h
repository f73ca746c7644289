// Copyright tollgate authors. The answer to one check.
#ifndef TOLLGATE_DECISION_H_
#define TOLLGATE_DECISION_H_

#include <cstdint>
#include <string_view>

namespace tollgate {

// Which part of tollgate made a decision.
enum class DecisionSource {
  kMemory,    // the embedded in-memory store
  kRedis,     // the shared Redis store, exact
  kSync,      // local counters synced with Redis (hot keys)
  kFallback,  // the store failed; the limit's `on_store_failure` policy answered
};

// Why a check was refused, or a settle, release or renewal found nothing to apply to.
// kNone when allowed.
enum class DenyReason {
  kNone,
  // Over the limit now; `retry_after_micros` says when this cost could pass.
  kOverLimit,
  // The cost is larger than the limit can ever allow; retrying will never help.
  kCostExceedsLimit,
  // The store is unavailable and the limit fails closed.
  kStoreUnavailable,
  // A settle, release or renewal of a reservation or lease that is not held: never made
  // (forged), expired, or (a lease) released.
  kNotFound,
  // A settle of a reservation that was settled already: nothing changed.
  kAlreadySettled,
};

// A denial is a value, not an error.
struct Decision {
  bool allowed = false;
  // The limit's maximum (token bucket capacity, or window limit).
  int64_t limit = 0;
  // What is left after this check (whole units, rounded down; 0 when in debt).
  int64_t remaining = 0;
  // What the limit owes beyond zero after this step (whole units, rounded up): only a charge
  // (consumption reported after the fact, which applies in full) can put a limit in debt,
  // and while it is, every check is refused, a peek (cost 0) too, until refill or a later
  // window repays it. 0 when not in debt. For a concurrency limit: leases held beyond the
  // limit (after the limit was lowered).
  int64_t debt = 0;
  // Until the bucket is full again / the window ends.
  int64_t reset_after_micros = 0;
  // Until this cost could pass; 0 when allowed, and 0 for kCostExceedsLimit (never). A
  // peek (cost 0, always allowed) says here when a cost of 1 could pass: 0 if now.
  int64_t retry_after_micros = 0;
  DecisionSource source = DecisionSource::kMemory;
  DenyReason reason = DenyReason::kNone;
};

std::string_view DecisionSourceName(DecisionSource source);
std::string_view DenyReasonName(DenyReason reason);

}  // namespace tollgate

#endif  // TOLLGATE_DECISION_H_
