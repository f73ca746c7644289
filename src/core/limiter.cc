// Copyright tollgate authors.
#include "tollgate/limiter.h"

#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/optimization.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "src/core/absl_view.h"
#include "src/core/batch.h"
#include "src/core/metered_ids.h"
#include "tollgate/memory_store.h"

namespace tollgate {
namespace {

// The checks every request gets before it reaches a store, with the messages users see.
absl::Status ValidateRequest(std::string_view name, std::string_view key, int64_t cost) {
  const absl::string_view limit = AbslView(name);
  if (key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("limit '", limit, "': key must not be empty"));
  }
  if (key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat("limit '", limit, "': key is ", key.size(),
                                                   " bytes, more than ", kMaxKeyBytes));
  }
  if (cost < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("limit '", limit, "': cost must be >= 0, got ", cost));
  }
  return absl::OkStatus();
}

// A check of a concurrency limit that would take a slot without keeping its lease.
absl::Status LeaseNeedsAcquire(std::string_view limit) {
  return absl::InvalidArgumentError(
      absl::StrCat("limit '", AbslView(limit),
                   "' is a concurrency limit: take a slot with Acquire (or in CheckAll), which "
                   "keeps the lease; Check may only peek (cost 0)"));
}

absl::Status UnknownLimit(std::string_view limit) {
  return absl::NotFoundError(absl::StrCat("unknown limit '", AbslView(limit), "'"));
}

// What an item's op asks of its limit, beyond ValidateRequest.
absl::Status ValidateOp(const CheckItem& item) {
  const absl::string_view name = AbslView(item.limit->name);
  const bool concurrency = item.limit->numbers.algorithm == Algorithm::kConcurrency;
  if (concurrency && item.op == ItemOp::kCheck && item.cost > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("limit '", name,
                     "' is a concurrency limit: a lease takes one slot (cost 1, or 0 to peek)"));
  }
  if (concurrency && item.op != ItemOp::kCheck && item.op != ItemOp::kRelease &&
      item.op != ItemOp::kRenew) {
    return absl::InvalidArgumentError(absl::StrCat(
        "limit '", name, "' is a concurrency limit: it takes leases, not charges or reservations"));
  }
  if (!concurrency && (item.op == ItemOp::kRelease || item.op == ItemOp::kRenew)) {
    return absl::InvalidArgumentError(
        absl::StrCat("limit '", name, "' is not a concurrency limit: it holds no leases"));
  }
  if ((item.op == ItemOp::kCharge || item.op == ItemOp::kSettle) && item.cost > kMaxChargeCost) {
    return absl::InvalidArgumentError(absl::StrCat("limit '", name, "': cost must be at most ",
                                                   kMaxChargeCost, ", got ", item.cost));
  }
  if (item.op != ItemOp::kCheck && item.limit->mode == Mode::kSync) {
    return absl::InvalidArgumentError(
        absl::StrCat("limit '", name,
                     "' is in sync mode (local counts): charges, reservations and settles "
                     "need mode: exact"));
  }
  return absl::OkStatus();
}

// Whether a batch needs Store::ApplyAsync: an op other than kCheck, or a lease to take.
bool NeedsApply(const std::vector<CheckItem>& items) {
  for (const CheckItem& item : items) {
    if (item.op != ItemOp::kCheck || !item.id.empty()) return true;
  }
  return false;
}

// Whether `item` takes a lease of a concurrency limit (and so needs an id).
bool TakesLease(const CheckItem& item) {
  return item.op == ItemOp::kCheck && item.cost > 0 &&
         item.limit->numbers.algorithm == Algorithm::kConcurrency;
}

}  // namespace

struct Limiter::State {
  std::vector<Limit> limits;
  // Each limit's index in `limits`. Keys view the names in `limits`, which never change
  // after Create().
  absl::flat_hash_map<std::string_view, size_t> by_name;
  std::shared_ptr<Store> store;
  std::shared_ptr<Store> sync_store;
  // Every limit prepared on `store` (parallel to `limits`), where the store decides inline
  // (Store::PrepareCheck); null elsewhere (a remote store, or numbers the store refuses,
  // whose checks then answer why). Declared after `store`, so destroyed before it.
  std::vector<std::unique_ptr<PreparedCheck>> prepared;
};

absl::StatusOr<std::unique_ptr<Limiter>> Limiter::Create(LimiterOptions options) {
  auto state = std::make_unique<State>();
  state->limits = std::move(options.limits);
  for (const Limit& limit : state->limits) {
    if (absl::Status status = ValidateLimit(limit); !status.ok()) return status;
    if (!state->by_name.emplace(limit.name, state->by_name.size()).second) {
      return absl::InvalidArgumentError(absl::StrCat("two limits are named ", limit.name));
    }
  }
  state->store = std::move(options.store);
  state->sync_store = std::move(options.sync_store);
  if (state->store == nullptr) {
    MemoryStoreOptions memory_options;
    memory_options.clock = options.clock;
    absl::StatusOr<std::unique_ptr<MemoryStore>> store = MemoryStore::Create(memory_options);
    if (!store.ok()) return store.status();
    state->store = std::move(*store);
  }
  state->prepared.reserve(state->limits.size());
  for (const Limit& limit : state->limits) {
    state->prepared.push_back(state->store->PrepareCheck(limit));
  }
  return std::unique_ptr<Limiter>(new Limiter(std::move(state)));
}

Limiter::Limiter(std::unique_ptr<State> state) : state_(std::move(state)) {}

Limiter::~Limiter() = default;

const Limit* Limiter::FindLimit(std::string_view name) const {
  auto it = state_->by_name.find(name);
  return it == state_->by_name.end() ? nullptr : &state_->limits[it->second];
}

const std::vector<Limit>& Limiter::limits() const { return state_->limits; }

Store& Limiter::store() const { return *state_->store; }

void Limiter::CheckAllAsync(std::vector<CheckRequest> requests, MultiDecisionCallback done) {
  if (requests.empty()) {
    std::move(done)(absl::InvalidArgumentError("no limits to check"));
    return;
  }
  std::vector<CheckItem> items;
  items.reserve(requests.size());
  for (CheckRequest& request : requests) {
    const Limit* limit = FindLimit(request.limit);
    if (limit == nullptr) {
      std::move(done)(UnknownLimit(request.limit));
      return;
    }
    items.push_back(CheckItem{limit, std::move(request.key), request.cost});
    if (request.reserve) items.back().op = ItemOp::kReserve;
  }
  CheckItemsAsync(std::move(items), std::move(done));
}

void Limiter::CheckItemsAsync(std::vector<CheckItem> items, MultiDecisionCallback done) {
  if (items.empty()) {
    std::move(done)(absl::InvalidArgumentError("no limits to check"));
    return;
  }
  size_t sync_items = 0;
  bool any_shadow = false;
  for (CheckItem& item : items) {
    if (absl::Status status = ValidateRequest(item.limit->name, item.key, item.cost);
        !status.ok()) {
      std::move(done)(std::move(status));
      return;
    }
    if (absl::Status status = ValidateOp(item); !status.ok()) {
      std::move(done)(std::move(status));
      return;
    }
    if ((item.op == ItemOp::kReserve || TakesLease(item)) && item.id.empty()) {
      item.id = internal::NewMeteredId();
    }
    if (item.limit->mode == Mode::kSync && state_->sync_store != nullptr) ++sync_items;
    any_shadow |= item.shadow;
  }
  if (sync_items != 0 && sync_items != items.size()) {
    std::move(done)(absl::InvalidArgumentError(
        "limits in sync mode cannot be checked in one all-or-nothing request together with "
        "exact limits; check them separately"));
    return;
  }
  Store& store = sync_items != 0 ? *state_->sync_store : *state_->store;
  const bool apply = NeedsApply(items);
  // What the answer needs of the items once the store has them: which ones decide the batch
  // and, for the reservations, what their tokens name. Kept only when there is more to it
  // than "every item decides".
  struct Kept {
    std::vector<CheckItem> items;  // without keys, except for reservations
  };
  std::shared_ptr<Kept> kept;
  if (apply || any_shadow) {
    kept = std::make_shared<Kept>();
    kept->items.reserve(items.size());
    for (const CheckItem& item : items) {
      CheckItem copy{item.limit, "", item.cost};
      copy.shadow = item.shadow;
      copy.op = item.op;
      if (item.op == ItemOp::kReserve) copy.key = item.key;
      if (item.op == ItemOp::kReserve || TakesLease(item)) copy.id = item.id;
      kept->items.push_back(std::move(copy));
    }
  }
  auto answer = [done = std::move(done),
                 kept = std::move(kept)](absl::StatusOr<std::vector<Decision>> decisions) mutable {
    if (!decisions.ok()) {
      std::move(done)(decisions.status());
      return;
    }
    MultiDecision result;
    if (kept == nullptr) {
      result.allowed = true;
      for (const Decision& decision : *decisions) result.allowed &= decision.allowed;
    } else if (kept->items.size() != decisions->size()) {
      std::move(done)(absl::InternalError("the store returned a wrong number of decisions"));
      return;
    } else {
      result.allowed = internal::BatchAllowed(kept->items, *decisions);
      for (size_t i = 0; result.allowed && i < kept->items.size(); ++i) {
        const CheckItem& item = kept->items[i];
        if (item.id.empty() || !(*decisions)[i].allowed) continue;
        if (result.tokens.empty()) result.tokens.resize(kept->items.size());
        result.tokens[i] = item.op == ItemOp::kReserve
                               ? internal::ReservationToken(item.id, item.limit->name, item.key)
                               : item.id;  // a lease
      }
    }
    result.decisions = std::move(*decisions);
    std::move(done)(std::move(result));
  };
  if (apply) {
    store.ApplyAsync(std::move(items), std::move(answer));
  } else {
    store.CheckAsync(std::move(items), std::move(answer));
  }
}

void Limiter::CheckAsync(const Limit& limit, std::string_view key, int64_t cost,
                         DecisionCallback done) {
  if (ABSL_PREDICT_FALSE(key.empty() || key.size() > kMaxKeyBytes || cost < 0)) {
    std::move(done)(ValidateRequest(limit.name, key, cost));
    return;
  }
  if (ABSL_PREDICT_FALSE(limit.numbers.algorithm == Algorithm::kConcurrency && cost > 0)) {
    std::move(done)(LeaseNeedsAcquire(limit.name));
    return;
  }
  if (limit.mode == Mode::kSync && state_->sync_store != nullptr) {
    // Local decisions: the sync store answers inline.
    std::move(done)(state_->sync_store->CheckOne(limit, key, cost));
    return;
  }
  // One of ours, on a store that decides inline: its prepared form. Another limit (an
  // override) goes the general way.
  const Limit* first = state_->limits.data();
  if (&limit >= first && &limit < first + state_->limits.size()) {
    if (PreparedCheck* prepared = state_->prepared[&limit - first].get(); prepared != nullptr) {
      std::move(done)(prepared->CheckOne(key, cost));
      return;
    }
  }
  std::vector<CheckItem> items;
  items.push_back(CheckItem{&limit, std::string(key), cost});
  state_->store->CheckAsync(
      std::move(items),
      [done = std::move(done)](absl::StatusOr<std::vector<Decision>> decisions) mutable {
        if (!decisions.ok()) {
          std::move(done)(decisions.status());
        } else if (decisions->size() != 1) {
          std::move(done)(absl::InternalError("the store returned a wrong number of decisions"));
        } else {
          std::move(done)(decisions->front());
        }
      });
}

absl::StatusOr<MultiDecision> Limiter::CheckAll(absl::Span<const CheckRequest> requests) {
  // The callback writes into this frame, which outlives it: we wait for it before returning.
  // (The memory store answers inline, so the wait is usually already over.)
  absl::Notification answered;
  absl::StatusOr<MultiDecision> result;
  CheckAllAsync(std::vector<CheckRequest>(requests.begin(), requests.end()),
                [&](absl::StatusOr<MultiDecision> decision) {
                  result = std::move(decision);
                  answered.Notify();
                });
  answered.WaitForNotification();
  return result;
}

std::future<absl::StatusOr<MultiDecision>> Limiter::CheckAllFuture(
    std::vector<CheckRequest> requests) {
  auto promise = std::make_shared<std::promise<absl::StatusOr<MultiDecision>>>();
  std::future<absl::StatusOr<MultiDecision>> result = promise->get_future();
  CheckAllAsync(std::move(requests), [promise](absl::StatusOr<MultiDecision> decision) {
    promise->set_value(std::move(decision));
  });
  return result;
}

namespace {

// Runs `start` with a callback and waits for it: the callback writes into this frame, which
// outlives it.
template <typename T, typename Start>
absl::StatusOr<T> Wait(Start start) {
  absl::Notification answered;
  absl::StatusOr<T> result;
  start([&](absl::StatusOr<T> answer) {
    result = std::move(answer);
    answered.Notify();
  });
  answered.WaitForNotification();
  return result;
}

// The one decision of a one-item MultiDecision.
absl::StatusOr<Decision> Single(absl::StatusOr<MultiDecision> result) {
  if (!result.ok()) return result.status();
  if (result->decisions.size() != 1) {
    return absl::InternalError("the store returned a wrong number of decisions");
  }
  return result->decisions.front();
}

}  // namespace

absl::StatusOr<MultiDecision> Limiter::ChargeAll(absl::Span<const CheckRequest> requests) {
  std::vector<CheckItem> items;
  items.reserve(requests.size());
  for (const CheckRequest& request : requests) {
    const Limit* limit = FindLimit(request.limit);
    if (limit == nullptr) return UnknownLimit(request.limit);
    items.push_back(CheckItem{limit, request.key, request.cost});
    items.back().op = ItemOp::kCharge;
  }
  return Wait<MultiDecision>(
      [&](MultiDecisionCallback done) { CheckItemsAsync(std::move(items), std::move(done)); });
}

absl::StatusOr<Decision> Limiter::Charge(std::string_view limit, std::string_view key,
                                         int64_t cost) {
  const CheckRequest request{std::string(limit), std::string(key), cost};
  return Single(ChargeAll(absl::MakeConstSpan(&request, 1)));
}

absl::StatusOr<Reservation> Limiter::Reserve(std::string_view limit, std::string_view key,
                                             int64_t cost) {
  const CheckRequest request{std::string(limit), std::string(key), cost, /*reserve=*/true};
  absl::StatusOr<MultiDecision> result = Wait<MultiDecision>([&](MultiDecisionCallback done) {
    CheckAllAsync(std::vector<CheckRequest>{request}, std::move(done));
  });
  absl::StatusOr<Decision> decision = Single(result);
  if (!decision.ok()) return decision.status();
  Reservation reservation{*decision, ""};
  if (!result->tokens.empty()) reservation.token = std::move(result->tokens[0]);
  return reservation;
}

void Limiter::SettleAsync(std::string_view reservation, int64_t cost, DecisionCallback done) {
  std::optional<internal::ReservationParts> parts = internal::ParseReservationToken(reservation);
  if (!parts.has_value()) {
    std::move(done)(absl::InvalidArgumentError("reservation: not a reservation token"));
    return;
  }
  const Limit* limit = FindLimit(parts->limit);
  if (limit == nullptr) {
    // Made by a limit this configuration no longer has (or forged): nothing to settle.
    Decision decision;
    decision.reason = DenyReason::kNotFound;
    std::move(done)(decision);
    return;
  }
  std::vector<CheckItem> items;
  items.push_back(CheckItem{limit, std::move(parts->key), cost});
  items.back().op = ItemOp::kSettle;
  items.back().id = std::move(parts->id);
  CheckItemsAsync(std::move(items),
                  [done = std::move(done)](absl::StatusOr<MultiDecision> result) mutable {
                    std::move(done)(Single(std::move(result)));
                  });
}

absl::StatusOr<Decision> Limiter::Settle(std::string_view reservation, int64_t cost) {
  return Wait<Decision>(
      [&](DecisionCallback done) { SettleAsync(reservation, cost, std::move(done)); });
}

void Limiter::LeaseAsync(const Limit& limit, std::string_view key, std::string_view lease,
                         ItemOp op, DecisionCallback done) {
  std::vector<CheckItem> items;
  items.push_back(CheckItem{&limit, std::string(key), 1});
  items.back().op = op;
  items.back().id = std::string(lease);
  if (!internal::IsMeteredId(lease)) {
    // Not an id this library could have made: held by no one. The answer describes the
    // limit as its store sees it (a look, cost 0), as for a lease that is no longer held.
    if (absl::Status status = ValidateOp(items.back()); !status.ok()) {
      std::move(done)(std::move(status));
      return;
    }
    items.back() = CheckItem{&limit, std::string(key), 0};
    CheckItemsAsync(std::move(items),
                    [done = std::move(done)](absl::StatusOr<MultiDecision> result) mutable {
                      absl::StatusOr<Decision> decision = Single(std::move(result));
                      if (decision.ok()) {
                        decision->allowed = false;
                        decision->reason = DenyReason::kNotFound;
                        decision->retry_after_micros = 0;
                      }
                      std::move(done)(std::move(decision));
                    });
    return;
  }
  CheckItemsAsync(std::move(items),
                  [done = std::move(done)](absl::StatusOr<MultiDecision> result) mutable {
                    std::move(done)(Single(std::move(result)));
                  });
}

void Limiter::ReleaseAsync(const Limit& limit, std::string_view key, std::string_view lease,
                           DecisionCallback done) {
  LeaseAsync(limit, key, lease, ItemOp::kRelease, std::move(done));
}

void Limiter::RenewAsync(const Limit& limit, std::string_view key, std::string_view lease,
                         DecisionCallback done) {
  LeaseAsync(limit, key, lease, ItemOp::kRenew, std::move(done));
}

absl::StatusOr<Decision> Limiter::Release(std::string_view limit, std::string_view key,
                                          std::string_view lease) {
  const Limit* found = FindLimit(limit);
  if (found == nullptr) return UnknownLimit(limit);
  return Wait<Decision>(
      [&](DecisionCallback done) { ReleaseAsync(*found, key, lease, std::move(done)); });
}

absl::StatusOr<Decision> Limiter::Renew(std::string_view limit, std::string_view key,
                                        std::string_view lease) {
  const Limit* found = FindLimit(limit);
  if (found == nullptr) return UnknownLimit(limit);
  return Wait<Decision>(
      [&](DecisionCallback done) { RenewAsync(*found, key, lease, std::move(done)); });
}

absl::StatusOr<Lease> Limiter::Acquire(std::string_view limit, std::string_view key) {
  const Limit* found = FindLimit(limit);
  if (found == nullptr) return UnknownLimit(limit);
  if (found->numbers.algorithm != Algorithm::kConcurrency) {
    return absl::InvalidArgumentError(absl::StrCat(
        "limit '", AbslView(limit), "' is not a concurrency limit: nothing to acquire"));
  }
  std::vector<CheckItem> items;
  items.push_back(CheckItem{found, std::string(key), 1});
  absl::StatusOr<MultiDecision> result = Wait<MultiDecision>(
      [&](MultiDecisionCallback done) { CheckItemsAsync(std::move(items), std::move(done)); });
  absl::StatusOr<Decision> decision = Single(result);
  if (!decision.ok()) return decision.status();
  Lease lease;
  lease.decision_ = *decision;
  if (decision->allowed && !result->tokens.empty()) {
    lease.limiter_ = this;
    lease.limit_ = found;
    lease.key_ = std::string(key);
    lease.id_ = std::move(result->tokens[0]);
  }
  return lease;
}

Lease::Lease(Lease&& other) noexcept
    : limiter_(std::exchange(other.limiter_, nullptr)),
      limit_(other.limit_),
      key_(std::move(other.key_)),
      id_(std::move(other.id_)),
      decision_(other.decision_) {}

Lease& Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    (void)Release();
    limiter_ = std::exchange(other.limiter_, nullptr);
    limit_ = other.limit_;
    key_ = std::move(other.key_);
    id_ = std::move(other.id_);
    decision_ = other.decision_;
  }
  return *this;
}

Lease::~Lease() { (void)Release(); }

absl::StatusOr<Decision> Lease::Renew() {
  if (limiter_ == nullptr) return absl::FailedPreconditionError("no lease held");
  absl::StatusOr<Decision> renewed = Wait<Decision>(
      [&](DecisionCallback done) { limiter_->RenewAsync(*limit_, key_, id_, std::move(done)); });
  // Expired: its slot may be another's; this object no longer holds it.
  if (renewed.ok() && !renewed->allowed) limiter_ = nullptr;
  return renewed;
}

absl::Status Lease::Release() {
  if (limiter_ == nullptr) return absl::OkStatus();
  Limiter* limiter = std::exchange(limiter_, nullptr);
  absl::StatusOr<Decision> released = Wait<Decision>(
      [&](DecisionCallback done) { limiter->ReleaseAsync(*limit_, key_, id_, std::move(done)); });
  return released.status();
}

absl::StatusOr<Decision> Limiter::Check(std::string_view limit, std::string_view key,
                                        int64_t cost) {
  // The single-item path: no request vector, no MultiDecision, no callback; the memory store
  // answers it without allocating.
  auto it = state_->by_name.find(limit);
  if (it == state_->by_name.end()) return UnknownLimit(limit);
  if (ABSL_PREDICT_FALSE(key.empty() || key.size() > kMaxKeyBytes || cost < 0)) {
    return ValidateRequest(limit, key, cost);
  }
  const Limit& found = state_->limits[it->second];
  if (ABSL_PREDICT_FALSE(found.numbers.algorithm == Algorithm::kConcurrency && cost > 0)) {
    return LeaseNeedsAcquire(found.name);
  }
  if (found.mode == Mode::kSync && state_->sync_store != nullptr) {
    return state_->sync_store->CheckOne(found, key, cost);
  }
  if (PreparedCheck* prepared = state_->prepared[it->second].get(); prepared != nullptr) {
    return prepared->CheckOne(key, cost);
  }
  return state_->store->CheckOne(found, key, cost);
}

}  // namespace tollgate
