// Copyright tollgate authors. The entry point: check limits for keys.
//
//   auto config = tollgate::LoadConfigFile("limits.yaml");
//   auto limiter = tollgate::Limiter::Create({.limits = config->limits});
//   auto decision = (*limiter)->Check("api_per_user", "user:42");
//   if (decision.ok() && !decision->allowed) { /* 429, Retry-After */ }
#ifndef TOLLGATE_LIMITER_H_
#define TOLLGATE_LIMITER_H_

#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tollgate/clock.h"
#include "tollgate/decision.h"
#include "tollgate/limit.h"
#include "tollgate/store.h"

namespace tollgate {

// Keys longer than this are refused with InvalidArgument.
inline constexpr size_t kMaxKeyBytes = 1024;

struct LimiterOptions {
  // The limits this limiter knows, by unique name.
  std::vector<Limit> limits;
  // Where state lives. nullptr means a fresh in-memory store using `clock`.
  std::shared_ptr<Store> store = nullptr;
  // Where limits with `mode: sync` live (a SyncStore: local counts synced with Redis).
  // nullptr: they are checked exactly in `store` like every other limit. A request that
  // mixes sync and exact limits is refused with InvalidArgument: all-or-nothing across a
  // local and a shared store cannot be kept.
  std::shared_ptr<Store> sync_store = nullptr;
  // Time source for the in-memory store. nullptr means SystemClock().
  // REQUIRES: outlives the limiter.
  Clock* clock = nullptr;
};

// The largest cost a charge (or a settle) may carry: a count above it is refused with
// InvalidArgument (almost certainly a bug, and it keeps every store's arithmetic exact).
inline constexpr int64_t kMaxChargeCost = 1'000'000'000'000;

// One limit to check for one key, by limit name.
struct CheckRequest {
  std::string limit;
  std::string key;
  int64_t cost = 1;
  // Reserve `cost` (an estimate) to settle later at the actual cost (Limiter::Settle): an
  // admitted request's MultiDecision::tokens holds the reservation. Rate limits only.
  bool reserve = false;
};

// The answer to a request of several limits: allowed only if every limit allowed it, in
// which case all were consumed; otherwise none was.
struct MultiDecision {
  bool allowed = false;
  // One per request item, in order.
  std::vector<Decision> decisions;
  // When the request was admitted and reserved or leased something: one per item, the
  // reservation of a reserving item (for Settle), "" for the others. Empty otherwise.
  std::vector<std::string> tokens = {};
};

// An admitted reservation (Limiter::Reserve): its decision, and the token that settles it
// ("" when refused: nothing was reserved).
struct Reservation {
  Decision decision;
  std::string token;
};

using MultiDecisionCallback = absl::AnyInvocable<void(absl::StatusOr<MultiDecision>) &&>;
using DecisionCallback = absl::AnyInvocable<void(absl::StatusOr<Decision>) &&>;

class Limiter;

// A slot of a concurrency limit, held until released (by Release() or this object's
// destructor) or until it expires: a lease not renewed within the limit's lease time expires,
// so a holder that dies frees its slot. Move-only. Not thread-safe (one holder); the
// Limiter is.
//
//   absl::StatusOr<tollgate::Lease> lease = limiter->Acquire("llm_concurrent", "tenant:7");
//   if (!lease.ok()) { /* store error */ }
//   if (!lease->held()) { /* 429: lease->decision().retry_after_micros */ }
//   ... stream the response, lease->Renew() now and then ...
//   // released here, when `lease` goes out of scope
class Lease {
 public:
  // Holds nothing.
  Lease() = default;
  Lease(Lease&& other) noexcept;
  // Releases what this held, then takes `other`'s.
  Lease& operator=(Lease&& other) noexcept;
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  // Releases the lease if held; an error is ignored (the lease then expires by itself).
  ~Lease();

  // Whether this holds a slot: the acquire was admitted and it was neither released nor found
  // expired by Renew.
  bool held() const { return limiter_ != nullptr; }
  // The acquire's decision: when refused, retry_after_micros says when a slot frees.
  const Decision& decision() const { return decision_; }
  // The lease's id (what POST /v1/acquire answers as "lease"); "" when refused.
  const std::string& id() const { return id_; }

  // Extends the lease to a lease time from now. A decision that is not allowed (kNotFound)
  // means it expired: the slot may be another's and this no longer holds it.
  // FailedPrecondition when nothing is held. Blocks until the store answers.
  absl::StatusOr<Decision> Renew();
  // Frees the slot now (idempotent: OK when nothing is held). Blocks until the store answers.
  absl::Status Release();

 private:
  friend class Limiter;
  Limiter* limiter_ = nullptr;  // non-null while held
  const Limit* limit_ = nullptr;
  std::string key_;
  std::string id_;
  Decision decision_;
};

// Checks named limits against a store. A denial is a Decision; an error (unknown limit,
// empty or oversized key, negative cost, store failure) is a non-OK status.
//
// Thread-safe: every method may be called concurrently.
class Limiter {
 public:
  // InvalidArgument if two limits share a name or a limit's numbers are invalid.
  static absl::StatusOr<std::unique_ptr<Limiter>> Create(LimiterOptions options);

  Limiter(const Limiter&) = delete;
  Limiter& operator=(const Limiter&) = delete;
  ~Limiter();

  // Checks one limit for one key; blocks until the store answers.
  absl::StatusOr<Decision> Check(std::string_view limit, std::string_view key, int64_t cost = 1);

  // Checks several limits for one request, all or nothing; blocks until the store answers.
  absl::StatusOr<MultiDecision> CheckAll(absl::Span<const CheckRequest> requests);

  // Asynchronous CheckAll: `done` runs exactly once, possibly before this returns (memory
  // store) or on a store thread. Validation errors are delivered through `done` too.
  void CheckAllAsync(std::vector<CheckRequest> requests, MultiDecisionCallback done);

  // CheckAllAsync for limits given by pointer instead of by name (no name lookups): for a
  // service that resolved its limits already, and for limits this limiter was not created
  // with (such as Envoy's per-request `limit` overrides, which are checked in `store`).
  // The same validation (key, cost; an empty list is InvalidArgument) and routing: sync
  // limits in `sync_store`, everything else in `store`; mixing both is InvalidArgument.
  // Shadow items (CheckItem::shadow) follow Store's rule: MultiDecision::allowed is true
  // when every non-shadow item is allowed. Items may have any op (CheckItem::op, applied
  // by Store::ApplyAsync in one step): charges, reservations (their ids are made here and
  // their tokens returned in MultiDecision::tokens), settles. Refused with InvalidArgument:
  // a charge or settle cost above kMaxChargeCost, an op other than kCheck on a sync limit.
  // `done` runs exactly once, possibly before this returns. REQUIRES: every item.limit
  // non-null and alive until `done` has run (the limits() of this limiter live as long as
  // it does).
  void CheckItemsAsync(std::vector<CheckItem> items, MultiDecisionCallback done);

  // Consumption that already happened (an LLM response's tokens, bytes sent): `cost` is
  // added to `limit` for `key` in full, whatever is left, so the limit may go into debt;
  // later checks are refused, peeks too, until refill or a later window repays it. Never
  // refused: the decision (allowed) says what is left or owed (Decision::debt) and, in
  // retry_after_micros, when a cost of 1 would pass again. Blocks until the store answers.
  absl::StatusOr<Decision> Charge(std::string_view limit, std::string_view key, int64_t cost);

  // Several charges in one atomic store step, each applied in full (not all or nothing:
  // none is ever refused).
  absl::StatusOr<MultiDecision> ChargeAll(absl::Span<const CheckRequest> requests);

  // Reserves `cost` (an estimate) of `limit` for `key`: a check that, admitted, returns the
  // token to settle it with once the actual cost is known. Several items at once, with other
  // limits: CheckAll with CheckRequest::reserve. Blocks until the store answers.
  absl::StatusOr<Reservation> Reserve(std::string_view limit, std::string_view key, int64_t cost);

  // Settles `reservation` (a token of Reserve) at the actual `cost`: a smaller cost gives the
  // difference back to the window or bucket the reservation came from (nothing once that
  // window is over or the bucket has refilled), a larger one charges the extra (as Charge).
  // The decision says what the limit has left after it. Settled once: a second settle is
  // refused with DenyReason::kAlreadySettled, an unknown reservation (forged, or forgotten
  // after the limit's reservation_ttl) with kNotFound, and neither changes anything.
  // InvalidArgument for what is not a token at all, or a cost outside 0..kMaxChargeCost.
  void SettleAsync(std::string_view reservation, int64_t cost, DecisionCallback done);
  absl::StatusOr<Decision> Settle(std::string_view reservation, int64_t cost);

  // Takes a slot of the concurrency limit `limit` for `key`: a Lease that holds it (held())
  // when admitted, or one that holds nothing, whose decision says when to retry. Several
  // limits at once, all or nothing: CheckAll (a concurrency item takes its slot there, its
  // lease id in MultiDecision::tokens). InvalidArgument for a limit that is not a
  // concurrency limit. REQUIRES: this limiter outlives the Lease. Blocks until the store
  // answers.
  absl::StatusOr<Lease> Acquire(std::string_view limit, std::string_view key);

  // Frees the lease `lease` of `limit` for `key`: allowed when it was held, else kNotFound
  // (expired, released already, never granted). Idempotent.
  void ReleaseAsync(const Limit& limit, std::string_view key, std::string_view lease,
                    DecisionCallback done);
  absl::StatusOr<Decision> Release(std::string_view limit, std::string_view key,
                                   std::string_view lease);
  // Extends the lease `lease` to one lease time from now: allowed when it was still held,
  // else kNotFound (it expired: acquire again).
  void RenewAsync(const Limit& limit, std::string_view key, std::string_view lease,
                  DecisionCallback done);
  absl::StatusOr<Decision> Renew(std::string_view limit, std::string_view key,
                                 std::string_view lease);

  // Checks one limit for one key without blocking: the memory store (and the sync store,
  // whose decisions are local) answer inline, before this returns, through the single-item
  // path (a limit of limits() through its prepared form; no vectors); Redis answers later
  // on a store thread. `key` need only live until this returns. Validation errors go to
  // `done` too; so does a cost above 0 on a concurrency limit (its slot needs a lease: use
  // Acquire or CheckItemsAsync). REQUIRES: `limit` alive until `done` has run.
  void CheckAsync(const Limit& limit, std::string_view key, int64_t cost, DecisionCallback done);

  // Asynchronous CheckAll as a future.
  std::future<absl::StatusOr<MultiDecision>> CheckAllFuture(std::vector<CheckRequest> requests);

  // The limit named `name`, or nullptr.
  const Limit* FindLimit(std::string_view name) const;
  const std::vector<Limit>& limits() const;
  Store& store() const;

 private:
  struct State;
  explicit Limiter(std::unique_ptr<State> state);
  // ReleaseAsync and RenewAsync (`op`).
  void LeaseAsync(const Limit& limit, std::string_view key, std::string_view lease, ItemOp op,
                  DecisionCallback done);
  std::unique_ptr<State> state_;
};

}  // namespace tollgate

#endif  // TOLLGATE_LIMITER_H_
