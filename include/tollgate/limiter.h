// Copyright tollgate authors. The entry point: check limits for keys.
//
//   auto config = tollgate::LoadConfigFile("limits.yaml");
//   auto limiter = tollgate::Limiter::Create({.limits = config->limits});
//   auto decision = (*limiter)->Check("api_per_user", "user:42");
//   if (decision.ok() && !decision->allowed) { /* 429, Retry-After */ }
//
// (tollgate/fleet.h builds the limiter over Redis, as `tollgate serve` runs it.)
//
// The shapes, the same for every verb:
//   - a limit is a LimitRef: its name, or the Limit itself (no lookup: one of limits(), or
//     a Limit this limiter was not created with, such as Envoy's per-request overrides);
//   - then the key, then the cost (or a lease's id); Settle takes the token Reserve gave
//     instead, which names its limit and key;
//   - Verb(...) blocks until the store answers and returns absl::StatusOr<...>;
//     VerbAsync(..., done) returns at once and calls `done` exactly once with the same
//     StatusOr: possibly before it returns (the memory store, the sync store), else on a
//     store thread;
//   - several limits at once, all or nothing: CheckAll / CheckAllAsync with CheckRequests,
//     whose `op` also reserves or charges.
// A denial is a Decision; an error (unknown limit, empty or oversized key, negative cost,
// store failure) is a non-OK status.
#ifndef TOLLGATE_LIMITER_H_
#define TOLLGATE_LIMITER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
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

// A limit, by name (one this limiter was created with) or by reference (a Limit that passes
// ValidateLimit: one of Limiter::limits(), or one the limiter was not created with, which is
// then checked in the store its mode names). A view, like std::string_view: a name need only live
// until the call that takes it returns; a Limit given by reference until the call's callback
// has run (for a Lease, as long as the Lease). A name of a temporary std::string is refused
// at compile time, since a CheckRequest would outlive it.
class LimitRef {
 public:
  // No limit: every call answers NotFound.
  LimitRef() = default;
  LimitRef(const Limit& limit) : limit_(&limit) {}    // NOLINT(google-explicit-constructor)
  LimitRef(std::string_view name) : name_(name) {}    // NOLINT(google-explicit-constructor)
  LimitRef(const char* name) : name_(name) {}         // NOLINT(google-explicit-constructor)
  LimitRef(const std::string& name) : name_(name) {}  // NOLINT(google-explicit-constructor)
  LimitRef(std::string&& name) = delete;              // NOLINT(google-explicit-constructor)

  // The Limit given by reference, or nullptr when given by name.
  const Limit* limit() const { return limit_; }
  // The name: the one given, or the referenced Limit's.
  std::string_view name() const { return limit_ != nullptr ? limit_->name : name_; }

 private:
  const Limit* limit_ = nullptr;
  std::string_view name_;
};

// One item of CheckAll.
struct CheckRequest {
  LimitRef limit;
  std::string key;
  // Whole units; 0 peeks (kCheck).
  int64_t cost = 1;
  // kCheck: consumed only if every kCheck and kReserve item of the request passes; on a
  // concurrency limit, cost 1 takes a slot (its lease id in MultiDecision::tokens) and 0
  // peeks. kReserve: a kCheck of a rate limit that, admitted, is an estimate to settle later
  // (its token in MultiDecision::tokens). kCharge: consumption that happened, applied in
  // full whatever the others do (never refused; see Charge). Other ops are InvalidArgument:
  // settles, releases and renewals have verbs of their own.
  ItemOp op = ItemOp::kCheck;
  // Decided and counted like the others but never refusing the request (Envoy's
  // shadow_mode): MultiDecision::allowed is true when every item that is not shadow is.
  bool shadow = false;
};

// The answer to a request of several limits: allowed only if every limit allowed it, in
// which case all were consumed; otherwise none was.
struct MultiDecision {
  bool allowed = false;
  // One per request item, in order.
  std::vector<Decision> decisions;
  // When the request was admitted and reserved or leased something: one per item, the
  // reservation of a reserving item (for Settle), the lease of a concurrency item that took
  // a slot (for Release and Renew), "" for the others. Empty otherwise.
  std::vector<std::string> tokens = {};
};

// An admitted reservation (Limiter::Reserve): its decision, and the token that settles it
// ("" when refused: nothing was reserved).
struct Reservation {
  Decision decision;
  std::string token;
};

class Lease;

using DecisionCallback = absl::AnyInvocable<void(absl::StatusOr<Decision>) &&>;
using MultiDecisionCallback = absl::AnyInvocable<void(absl::StatusOr<MultiDecision>) &&>;
using ReservationCallback = absl::AnyInvocable<void(absl::StatusOr<Reservation>) &&>;
using LeaseCallback = absl::AnyInvocable<void(absl::StatusOr<Lease>) &&>;

class Limiter;

// A slot of a concurrency limit, held until released or until it expires: a lease not
// renewed within the limit's lease time expires, so a holder that dies frees its slot.
// Move-only. Not thread-safe (one holder); the Limiter is.
//
//   absl::StatusOr<tollgate::Lease> lease = limiter->Acquire("llm_concurrent", "tenant:7");
//   if (!lease.ok()) { /* store error */ }
//   if (!lease->held()) { /* 429: lease->decision().retry_after_micros */ }
//   ... stream the response, lease->Renew() now and then ...
//   // released when `lease` goes out of scope (sent, not waited for), or by lease->Release()
//
// REQUIRES: the Limiter that granted it (and a Limit it was acquired by reference with)
// outlives it.
class Lease {
 public:
  // Holds nothing.
  Lease() = default;
  Lease(Lease&& other) noexcept;
  // Lets go of what this held (as the destructor does), then takes `other`'s.
  Lease& operator=(Lease&& other) noexcept;
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  // If held, sends the release and returns without waiting for the store: never blocks. A
  // release that fails leaves the slot to expire after the lease time.
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
  // FailedPrecondition when nothing is held. Blocks until the store answers
  // (Limiter::RenewAsync with id() is the asynchronous form).
  absl::StatusOr<Decision> Renew();
  // Frees the slot now and waits for the store's answer: OK, or why the release failed (the
  // slot then expires by itself). Idempotent: OK when nothing is held.
  absl::Status Release();

 private:
  friend class Limiter;
  // The destructor's release: sent, not waited for.
  void ReleaseInBackground();

  Limiter* limiter_ = nullptr;  // non-null while held
  const Limit* limit_ = nullptr;
  std::string key_;
  std::string id_;
  Decision decision_;
};

// Checks limits against a store; see the file comment for the shapes of every verb.
//
// Thread-safe: every method may be called concurrently.
class Limiter {
 public:
  // InvalidArgument if two limits share a name or a limit is not valid (ValidateLimit).
  static absl::StatusOr<std::unique_ptr<Limiter>> Create(LimiterOptions options);

  Limiter(const Limiter&) = delete;
  Limiter& operator=(const Limiter&) = delete;
  ~Limiter();

  // ---- Check: one limit for one key ----
  // Consumes `cost` if it passes. Answered inline, without allocating, by the memory store
  // (through the limit's PreparedCheck, for a limit of limits()) and by the sync store
  // (mode: sync); by Redis on a store thread. A cost above 0 on a concurrency limit is
  // InvalidArgument: its slot needs a lease (Acquire, or CheckAll).
  absl::StatusOr<Decision> Check(LimitRef limit, std::string_view key, int64_t cost = 1);
  void CheckAsync(LimitRef limit, std::string_view key, int64_t cost, DecisionCallback done);

  // ---- CheckAll: several limits for one request, all or nothing ----
  // See CheckRequest for what each item does. An empty request is InvalidArgument; so is one
  // that mixes sync-mode limits (in `sync_store`) with exact ones: all or nothing across a
  // local and a shared store cannot be kept, and so is a charge or reserve on a sync limit.
  absl::StatusOr<MultiDecision> CheckAll(std::vector<CheckRequest> requests);
  void CheckAllAsync(std::vector<CheckRequest> requests, MultiDecisionCallback done);

  // ---- Charge: consumption that already happened ----
  // An LLM response's tokens, bytes sent: `cost` is added to `limit` for `key` in full,
  // whatever is left, so the limit may go into debt; later checks are refused, peeks too,
  // until refill or a later window repays it. Never refused: the decision (allowed) says what
  // is left or owed (Decision::debt) and, in retry_after_micros, when a cost of 1 would pass
  // again. A cost above kMaxChargeCost is InvalidArgument. Several charges (and checks) in
  // one step: CheckAll with ItemOp::kCharge.
  absl::StatusOr<Decision> Charge(LimitRef limit, std::string_view key, int64_t cost);
  void ChargeAsync(LimitRef limit, std::string_view key, int64_t cost, DecisionCallback done);

  // ---- Reserve and Settle: an estimate now, the actual cost later ----
  // Reserve: a check of `cost` (an estimate) that, admitted, returns the token to settle it
  // with once the actual cost is known. With other limits: CheckAll with ItemOp::kReserve.
  absl::StatusOr<Reservation> Reserve(LimitRef limit, std::string_view key, int64_t cost);
  void ReserveAsync(LimitRef limit, std::string_view key, int64_t cost, ReservationCallback done);
  // Settle: `reservation` (a token of Reserve) at the actual `cost`: a smaller cost gives the
  // difference back to the window or bucket the reservation came from (nothing once that
  // window is over or the bucket has refilled), a larger one charges the extra (as Charge).
  // The decision says what the limit has left after it. Settled once: a second settle is
  // refused with DenyReason::kAlreadySettled, an unknown reservation (forged, or forgotten
  // after the limit's reservation_ttl) with kNotFound, and neither changes anything.
  // InvalidArgument for what is not a token at all, or a cost outside 0..kMaxChargeCost.
  absl::StatusOr<Decision> Settle(std::string_view reservation, int64_t cost);
  void SettleAsync(std::string_view reservation, int64_t cost, DecisionCallback done);

  // ---- Acquire, Release, Renew: a concurrency limit's slots ----
  // Acquire: a Lease that holds a slot of `limit` for `key` (held()) when admitted, or one
  // that holds nothing, whose decision says when to retry. Several limits at once, all or
  // nothing: CheckAll (a concurrency item takes its slot there, its lease id in
  // MultiDecision::tokens). InvalidArgument for a limit that is not a concurrency limit.
  absl::StatusOr<Lease> Acquire(LimitRef limit, std::string_view key);
  void AcquireAsync(LimitRef limit, std::string_view key, LeaseCallback done);
  // Release: frees the lease `lease` of `limit` for `key`: allowed when it was held, else
  // kNotFound (expired, released already, never granted). Idempotent.
  absl::StatusOr<Decision> Release(LimitRef limit, std::string_view key, std::string_view lease);
  void ReleaseAsync(LimitRef limit, std::string_view key, std::string_view lease,
                    DecisionCallback done);
  // Renew: extends the lease `lease` to one lease time from now: allowed when it was still
  // held, else kNotFound (it expired: acquire again).
  absl::StatusOr<Decision> Renew(LimitRef limit, std::string_view key, std::string_view lease);
  void RenewAsync(LimitRef limit, std::string_view key, std::string_view lease,
                  DecisionCallback done);

  // The limit named `name`, or nullptr. Lives as long as the limiter.
  const Limit* FindLimit(std::string_view name) const;
  // The limits this limiter was created with, in the order given.
  const std::vector<Limit>& limits() const;

 private:
  struct State;
  explicit Limiter(std::unique_ptr<State> state);
  // The Limit `ref` names, or NotFound.
  absl::StatusOr<const Limit*> Resolve(LimitRef ref) const;
  // Validated items to the store their limits live in; `done` gets their MultiDecision.
  void ApplyItems(std::vector<CheckItem> items, MultiDecisionCallback done);
  // One item of `op` (kCharge, kRelease, kRenew, ...) for `limit`; `done` gets its decision.
  void ApplyOne(const Limit& limit, std::string_view key, int64_t cost, ItemOp op, std::string id,
                DecisionCallback done);
  // ReleaseAsync and RenewAsync (`op`), and their blocking forms.
  void LeaseAsync(LimitRef limit, std::string_view key, std::string_view lease, ItemOp op,
                  DecisionCallback done);
  absl::StatusOr<Decision> LeaseWait(LimitRef limit, std::string_view key, std::string_view lease,
                                     ItemOp op);
  std::unique_ptr<State> state_;
};

}  // namespace tollgate

#endif  // TOLLGATE_LIMITER_H_
