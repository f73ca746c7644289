// Copyright tollgate authors. Where limit state lives.
#ifndef TOLLGATE_STORE_H_
#define TOLLGATE_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "tollgate/decision.h"
#include "tollgate/limit.h"

namespace tollgate {

// What a CheckItem asks of its limit (Store::ApplyAsync).
enum class ItemOp : uint8_t {
  // Consume `cost` if the batch passes (see Store). On a concurrency limit: take a slot as
  // the lease `id` (cost 1), or peek at the slots (cost 0).
  kCheck,
  // A kCheck of a rate limit that, when the batch passes, also records the reservation `id`
  // (its cost and when it was taken) for a later kSettle; the record is kept for the
  // limit's `reservation_ttl_micros`.
  kReserve,
  // Consumption that already happened (an LLM response's tokens): `cost` is added in full
  // whatever is left, so the limit may go into debt, which later checks must wait out.
  // Never refuses; allowed is true and the decision says what is left (or owed) after it.
  kCharge,
  // Settles the reservation `id` of this limit and key at the actual `cost`: a smaller cost
  // gives the difference back to the window or bucket the reservation took it from (nothing
  // once that window is over or the bucket has refilled), a larger one charges the extra
  // (kCharge). Once: a second settle is kAlreadySettled, an unknown (forged or expired)
  // reservation kNotFound, and neither changes anything.
  kSettle,
  // Releases the lease `id` of a concurrency limit: allowed when it was held, kNotFound
  // when it was not (expired, released already, never granted). Idempotent.
  kRelease,
  // Renews the lease `id` of a concurrency limit for another lease time from now: allowed
  // when it was still held, else kNotFound (it expired: acquire again).
  kRenew,
  // Consumption admitted elsewhere while this store could not be reached (a local fallback's),
  // added to the shared state as of `at_micros` so it is not forgotten: each item is applied
  // on its own, consumption whose window is already over is dropped, and a token bucket may go
  // into debt (docs/resilience.md#reconciliation). Its decision says only that it was applied
  // (allowed). In a batch of kAdd items only; a store that decides alone (the memory and sync
  // stores) answers Unimplemented.
  kAdd,
};

// Whether an item of this op takes part in a batch's all-or-nothing decision. The others
// (kCharge, kSettle, kRelease, kRenew, kAdd) are applied whatever the batch does.
inline bool IsConditional(ItemOp op) { return op == ItemOp::kCheck || op == ItemOp::kReserve; }

// One operation on one limit for one key.
struct CheckItem {
  // REQUIRES: non-null and outlives the call (until the callback has run).
  const Limit* limit = nullptr;
  std::string key;
  // Whole units; 0 peeks without consuming (kCheck).
  int64_t cost = 1;
  // kAdd: when the consumption happened, in microseconds since the epoch on the clock the
  // store was given (Clock::NowMicros()); 0 means now.
  int64_t at_micros = 0;
  // A conditional item that does not decide its batch (Envoy's shadow_mode rules): decided
  // and counted like the others, but never refuses the batch. See Store for the rule.
  bool shadow = false;
  ItemOp op = ItemOp::kCheck;
  // kReserve, kSettle: the reservation's id; kCheck of a concurrency limit with cost 1,
  // kRelease, kRenew: the lease's id. Made by the Limiter (22 URL-safe characters of a
  // 128-bit random number), which is what makes them impossible to guess.
  std::string id = {};
};

using CheckCallback = absl::AnyInvocable<void(absl::StatusOr<std::vector<Decision>>) &&>;

// One limit made ready on one store that decides inline (Store::PrepareCheck): CheckOne
// answers before returning, as a one-item kCheck batch of Store::ApplyAsync would on that
// store, without repeating the per-limit work. A snapshot of the limit as prepared.
// Thread-safe; valid while its store lives.
class PreparedCheck {
 public:
  virtual ~PreparedCheck() = default;
  // REQUIRES: key non-empty; cost >= 0 (else InvalidArgument).
  virtual absl::StatusOr<Decision> CheckOne(std::string_view key, int64_t cost) = 0;
};

// The status of a call whose writes the store made but that no replica confirmed within the
// time given (a durable limit's, Limit::durable): Unavailable, marked so that it can be told
// from a store that is down. What the call admitted stays spent in the store. ResilientStore
// answers it from the limits' on_store_failure without counting it against its circuit
// breaker, and without reconciling the fallback's admissions (the store counted the call).
absl::Status UnconfirmedWriteError(std::string_view message);
bool IsUnconfirmedWrite(const absl::Status& status);

// A place where limit state lives: the embedded memory store, Redis, ...
//
// A batch is one atomic step. Its items that are not conditional (kCharge, kSettle, kRelease,
// kRenew) are applied first, in order, whatever the batch does; then the conditional ones
// (kCheck, kReserve) are decided on what that leaves, all or nothing: if every one passes,
// all are consumed; if any is refused, none is. The decisions come back in the order of the
// items (see ItemOp for each op's). In a refused batch each conditional decision says whether
// that item alone would have passed (`allowed`); none of them consumed anything, and each
// `remaining` is what the item really has left (an allowed item's cost is not taken off).
//
// Shadow items (`CheckItem::shadow`) take part in the same step without deciding it: the
// batch passes when every non-shadow conditional item passes (a batch of shadow items only
// always passes), and then every allowed item, shadow or not, is consumed while a refused
// shadow item consumes nothing. When the batch is refused, nothing is consumed, as above.
//
// A failure to reach the state (Redis down, deadline passed) is a non-OK status, never a
// refusal; the caller's failure policy decides what to answer.
//
// Thread-safe: all methods may be called concurrently from any thread.
class Store {
 public:
  Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  virtual ~Store() = default;

  // Applies `items` in one step, as the class comment says, and calls `done` exactly once,
  // possibly before returning (the memory store answers inline) or later on a store-owned
  // thread. An op the store does not keep (such as leases on a store that has none) is
  // Unimplemented; an op its limit does not take (a lease on a rate limit) InvalidArgument.
  // REQUIRES: items non-empty; every item validated (non-empty key, cost >= 0); an `id`
  // where ItemOp asks for one.
  virtual void ApplyAsync(std::vector<CheckItem> items, CheckCallback done) = 0;

  // Blocking form of ApplyAsync.
  absl::StatusOr<std::vector<Decision>> Apply(std::vector<CheckItem> items);

  // For a store that decides inline (the memory store): `limit` made ready for repeated
  // checks, or nullptr if the store has no such path (a remote store) or the limit is
  // invalid for it. The default returns nullptr; callers then use ApplyAsync.
  virtual std::unique_ptr<PreparedCheck> PrepareCheck(const Limit& limit);

  // A short name for logs and metrics ("memory", "redis").
  virtual std::string_view Name() const = 0;
};

}  // namespace tollgate

#endif  // TOLLGATE_STORE_H_
