// Copyright tollgate authors. Answers a batch from each limit's on_store_failure while the
// store cannot.
#ifndef TOLLGATE_SRC_RESILIENCE_FALLBACK_POLICY_H_
#define TOLLGATE_SRC_RESILIENCE_FALLBACK_POLICY_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "src/resilience/demand_shares.h"
#include "src/resilience/limit_copies.h"
#include "tollgate/limit.h"
#include "tollgate/memory_store.h"
#include "tollgate/store.h"

namespace tollgate::resilience {

// Answers on a local memory store, all or nothing: fail_open at this instance's share of the
// limit (DemandShares), local with the limit's own local numbers, fail_closed refused with
// Retry-After (with a fail_closed limit in the batch no check consumes: they only peek). A
// charge is applied locally whatever its limit's policy (it happened). Reservations and
// leases taken here are the local store's own (a concurrency limit's share is local slots,
// never reconciled); a settle, release or renewal the local store does not know (a
// reservation or lease of the shared store) is answered Unavailable, since the shared store
// cannot apply it now. Thread-safe.
class FallbackPolicy {
 public:
  // REQUIRES: `shares` outlives this.
  FallbackPolicy(std::unique_ptr<MemoryStore> store, const DemandShares& shares,
                 int64_t fail_closed_retry_after_ms)
      : store_(std::move(store)),
        shares_(shares),
        fail_closed_retry_after_micros_(fail_closed_retry_after_ms * 1000) {}

  // Answers `items` with `instances` live. What the answer consumed (the checks of a batch it
  // admitted, a refused shadow item excepted, and every charge) goes to `consumed` before
  // `done` runs; both run before this returns (the memory store answers inline).
  void Answer(std::vector<CheckItem> items, int64_t instances,
              absl::FunctionRef<void(const std::vector<CheckItem>&)> consumed, CheckCallback done);

 private:
  // The limit the local store uses for `limit` with `instances` live.
  std::shared_ptr<const Limit> Substitute(const Limit& limit, int64_t instances);

  const std::unique_ptr<MemoryStore> store_;
  const DemandShares& shares_;
  const int64_t fail_closed_retry_after_micros_;
  LimitCopies substitutes_;
};

}  // namespace tollgate::resilience

#endif  // TOLLGATE_SRC_RESILIENCE_FALLBACK_POLICY_H_
