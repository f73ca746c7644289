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

// What a CheckItem asks of its limit (Store::ApplyAsync; Store::CheckAsync takes kCheck only).
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
};

// Whether an item of this op takes part in a batch's all-or-nothing decision. The others
// (kCharge, kSettle, kRelease, kRenew) are applied whatever the batch does.
inline bool IsConditional(ItemOp op) { return op == ItemOp::kCheck || op == ItemOp::kReserve; }

// One limit to check for one key.
struct CheckItem {
  // REQUIRES: non-null and outlives the call (until the callback has run).
  const Limit* limit = nullptr;
  std::string key;
  // Whole units to consume; 0 peeks without consuming.
  int64_t cost = 1;
  // Only for AddAsync: when the consumption happened, in microseconds since the epoch
  // (Clock::NowMicros()); 0 means now. CheckAsync ignores it.
  int64_t at_micros = 0;
  // Only for CheckAsync: a shadow item is decided and counted like the others but never
  // refuses its batch (Envoy's shadow_mode rules). See Store for the rule.
  bool shadow = false;
  // Only for ApplyAsync: what to do (kCheck for CheckAsync).
  ItemOp op = ItemOp::kCheck;
  // kReserve, kSettle: the reservation's id; kCheck of a concurrency limit with cost 1,
  // kRelease, kRenew: the lease's id. Made by the Limiter (22 URL-safe characters of a
  // 128-bit random number), which is what makes them impossible to guess.
  std::string id = {};
};

using AddCallback = absl::AnyInvocable<void(absl::Status) &&>;

using CheckCallback = absl::AnyInvocable<void(absl::StatusOr<std::vector<Decision>>) &&>;

// One limit made ready on one store that decides inline (Store::PrepareCheck): CheckOne
// answers before returning, as Store::CheckOne(limit, key, cost) would on that store, without
// repeating the per-limit work. A snapshot of the limit as prepared. Thread-safe; valid
// while its store lives.
class PreparedCheck {
 public:
  virtual ~PreparedCheck() = default;
  // REQUIRES: key non-empty; cost >= 0 (else InvalidArgument).
  virtual absl::StatusOr<Decision> CheckOne(std::string_view key, int64_t cost) = 0;
};

// A place where limit state lives: the embedded memory store, Redis, ...
//
// A check of several items is one all-or-nothing step: if every item passes, all are
// consumed; if any is refused, nothing is consumed. The decisions come back in the order
// of the items. In a refused batch each decision says whether that item alone would have
// passed (`allowed`); none of them consumed anything, and each `remaining` is what the
// item really has left (an allowed item's cost is not taken off).
//
// Shadow items (`CheckItem::shadow`) take part in the same step without deciding it: the
// batch passes when every non-shadow item passes (a batch of shadow items only always
// passes), and then every allowed item, shadow or not, is consumed while a refused shadow
// item consumes nothing. When the batch is refused, nothing is consumed, as above.
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

  // Checks `items` and calls `done` exactly once, possibly before returning (the memory
  // store answers inline) or later on a store-owned thread.
  // REQUIRES: items non-empty; every item validated (non-empty key, cost >= 0).
  virtual void CheckAsync(std::vector<CheckItem> items, CheckCallback done) = 0;

  // Blocking form of CheckAsync.
  absl::StatusOr<std::vector<Decision>> Check(std::vector<CheckItem> items);

  // Checks one limit for one key and blocks until the store answers: the same decision as
  // Check() with that single item, without the vectors. The default calls CheckAsync and
  // waits; a store that can answer inline (the memory store) overrides it with a path that
  // allocates nothing.
  // REQUIRES: `limit` outlives the call; key non-empty; cost >= 0 (else InvalidArgument).
  virtual absl::StatusOr<Decision> CheckOne(const Limit& limit, std::string_view key, int64_t cost);

  // Consumes each item's cost without checking: consumption that already happened
  // elsewhere (a local fallback while this store was unreachable) is added to the shared
  // state, so it is not forgotten. Each item is applied on its own (not all or nothing)
  // at the time `at_micros`; consumption whose window is already over is dropped, and a
  // token bucket may go into debt. The exact rule of each store is in
  // docs/resilience.md#reconciliation. Calls `done` exactly once, like CheckAsync.
  // The default answers Unimplemented.
  // REQUIRES: every item validated (non-empty key, cost >= 0).
  virtual void AddAsync(std::vector<CheckItem> items, AddCallback done);

  // CheckAsync for items of any op (CheckItem::op), in one atomic step: the items that are
  // not conditional (kCharge, kSettle, kRelease, kRenew) are applied first, in order, whatever
  // the batch does; then the conditional ones (kCheck, kReserve) are decided on what that
  // leaves, all or nothing, as CheckAsync decides. A batch of conditional items only is a
  // CheckAsync batch (with leases and reservations). Decisions come back in item order; see
  // ItemOp for each op's. The default passes a batch of kCheck items of rate limits to
  // CheckAsync and answers anything else Unimplemented.
  // REQUIRES: as CheckAsync; an `id` where ItemOp asks for one.
  virtual void ApplyAsync(std::vector<CheckItem> items, CheckCallback done);

  // Blocking form of ApplyAsync.
  absl::StatusOr<std::vector<Decision>> Apply(std::vector<CheckItem> items);

  // For a store that decides inline (the memory store): `limit` made ready for repeated
  // checks, or nullptr if the store has no such path (a remote store) or the limit is
  // invalid for it. The default returns nullptr; callers then use CheckAsync or CheckOne.
  virtual std::unique_ptr<PreparedCheck> PrepareCheck(const Limit& limit);

  // A short name for logs and metrics ("memory", "redis").
  virtual std::string_view Name() const = 0;
};

}  // namespace tollgate

#endif  // TOLLGATE_STORE_H_
