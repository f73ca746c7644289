// Copyright tollgate authors. Limiter: creation, Check and CheckAll (the metered verbs are in
// limiter_metered.cc).
#include "tollgate/limiter.h"

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/optimization.h"
#include "absl/strings/str_cat.h"
#include "src/core/absl_view.h"
#include "src/core/batch.h"
#include "src/core/metered_ids.h"
#include "src/limiter/limiter_state.h"
#include "tollgate/memory_store.h"

namespace tollgate {
namespace internal {

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

absl::Status UnknownLimit(std::string_view limit) {
  return absl::NotFoundError(absl::StrCat("unknown limit '", AbslView(limit), "'"));
}

absl::StatusOr<Decision> SingleDecision(absl::StatusOr<MultiDecision> result) {
  if (!result.ok()) return result.status();
  if (result->decisions.size() != 1) {
    return absl::InternalError("the store returned a wrong number of decisions");
  }
  return result->decisions.front();
}

}  // namespace internal

namespace {

// A check of a concurrency limit that would take a slot without keeping its lease.
absl::Status LeaseNeedsAcquire(std::string_view limit) {
  return absl::InvalidArgumentError(
      absl::StrCat("limit '", AbslView(limit),
                   "' is a concurrency limit: take a slot with Acquire (or in CheckAll), which "
                   "keeps the lease; Check may only peek (cost 0)"));
}

// Whether `item` takes a lease of a concurrency limit (and so needs an id).
bool TakesLease(const CheckItem& item) {
  return item.op == ItemOp::kCheck && item.cost > 0 &&
         item.limit->numbers.algorithm == Algorithm::kConcurrency;
}

// The one decision of a store's answer to one item.
absl::StatusOr<Decision> OnlyDecision(absl::StatusOr<std::vector<Decision>> decisions) {
  if (!decisions.ok()) return decisions.status();
  if (decisions->size() != 1) {
    return absl::InternalError("the store returned a wrong number of decisions");
  }
  return decisions->front();
}

}  // namespace

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

absl::StatusOr<const Limit*> Limiter::Resolve(LimitRef ref) const {
  if (ref.limit() != nullptr) return ref.limit();
  const Limit* found = FindLimit(ref.name());
  if (found == nullptr) return internal::UnknownLimit(ref.name());
  return found;
}

absl::StatusOr<Decision> Limiter::Check(LimitRef limit, std::string_view key, int64_t cost) {
  // The single-item path: no vectors, no MultiDecision, no callback (nor Resolve's
  // StatusOr); the memory store answers it without allocating.
  const Limit* found = limit.limit() != nullptr ? limit.limit() : FindLimit(limit.name());
  if (ABSL_PREDICT_FALSE(found == nullptr)) return internal::UnknownLimit(limit.name());
  const Limit& resolved = *found;
  if (ABSL_PREDICT_FALSE(key.empty() || key.size() > kMaxKeyBytes || cost < 0)) {
    return internal::ValidateRequest(resolved.name, key, cost);
  }
  if (ABSL_PREDICT_FALSE(resolved.numbers.algorithm == Algorithm::kConcurrency && cost > 0)) {
    return LeaseNeedsAcquire(resolved.name);
  }
  const bool sync = resolved.mode == Mode::kSync && state_->sync_store != nullptr;
  if (!sync) {
    // One of ours, on a store that decides inline: its prepared form.
    const Limit* first = state_->limits.data();
    if (&resolved >= first && &resolved < first + state_->limits.size()) {
      if (PreparedCheck* prepared = state_->prepared[&resolved - first].get()) {
        return prepared->CheckOne(key, cost);
      }
    }
  }
  Store& store = sync ? *state_->sync_store : *state_->store;
  std::vector<CheckItem> items;
  items.push_back(CheckItem{&resolved, std::string(key), cost});
  return OnlyDecision(store.Apply(std::move(items)));
}

void Limiter::CheckAsync(LimitRef limit, std::string_view key, int64_t cost,
                         DecisionCallback done) {
  absl::StatusOr<const Limit*> found = Resolve(limit);
  if (ABSL_PREDICT_FALSE(!found.ok())) {
    std::move(done)(found.status());
    return;
  }
  const Limit& resolved = **found;
  if (ABSL_PREDICT_FALSE(key.empty() || key.size() > kMaxKeyBytes || cost < 0)) {
    std::move(done)(internal::ValidateRequest(resolved.name, key, cost));
    return;
  }
  if (ABSL_PREDICT_FALSE(resolved.numbers.algorithm == Algorithm::kConcurrency && cost > 0)) {
    std::move(done)(LeaseNeedsAcquire(resolved.name));
    return;
  }
  const bool sync = resolved.mode == Mode::kSync && state_->sync_store != nullptr;
  if (!sync) {
    // One of ours, on a store that decides inline: its prepared form. Another limit (an
    // override) goes the general way.
    const Limit* first = state_->limits.data();
    if (&resolved >= first && &resolved < first + state_->limits.size()) {
      if (PreparedCheck* prepared = state_->prepared[&resolved - first].get()) {
        std::move(done)(prepared->CheckOne(key, cost));
        return;
      }
    }
  }
  Store& store = sync ? *state_->sync_store : *state_->store;
  std::vector<CheckItem> items;
  items.push_back(CheckItem{&resolved, std::string(key), cost});
  store.ApplyAsync(std::move(items), [done = std::move(done)](
                                         absl::StatusOr<std::vector<Decision>> decisions) mutable {
    std::move(done)(OnlyDecision(std::move(decisions)));
  });
}

absl::StatusOr<MultiDecision> Limiter::CheckAll(std::vector<CheckRequest> requests) {
  return internal::Wait<MultiDecision>(
      [&](MultiDecisionCallback done) { CheckAllAsync(std::move(requests), std::move(done)); });
}

void Limiter::CheckAllAsync(std::vector<CheckRequest> requests, MultiDecisionCallback done) {
  std::vector<CheckItem> items;
  items.reserve(requests.size());
  for (CheckRequest& request : requests) {
    absl::StatusOr<const Limit*> limit = Resolve(request.limit);
    if (!limit.ok()) {
      std::move(done)(limit.status());
      return;
    }
    if (request.op != ItemOp::kCheck && request.op != ItemOp::kReserve &&
        request.op != ItemOp::kCharge) {
      std::move(done)(absl::InvalidArgumentError(absl::StrCat(
          "limit '", (*limit)->name,
          "': CheckAll takes checks, reservations and charges; settle, release and renew "
          "have verbs of their own")));
      return;
    }
    CheckItem& item = items.emplace_back(CheckItem{*limit, std::move(request.key), request.cost});
    item.op = request.op;
    item.shadow = request.shadow;
  }
  ApplyItems(std::move(items), std::move(done));
}

void Limiter::ApplyItems(std::vector<CheckItem> items, MultiDecisionCallback done) {
  if (items.empty()) {
    std::move(done)(absl::InvalidArgumentError("no limits to check"));
    return;
  }
  size_t sync_items = 0;
  bool any_shadow = false;
  bool any_op = false;  // an op other than kCheck, or a lease to take
  for (CheckItem& item : items) {
    if (absl::Status status = internal::ValidateRequest(item.limit->name, item.key, item.cost);
        !status.ok()) {
      std::move(done)(std::move(status));
      return;
    }
    if (absl::Status status = internal::ValidateOp(item); !status.ok()) {
      std::move(done)(std::move(status));
      return;
    }
    if ((item.op == ItemOp::kReserve || TakesLease(item)) && item.id.empty()) {
      item.id = internal::NewMeteredId();
    }
    if (item.limit->mode == Mode::kSync && state_->sync_store != nullptr) ++sync_items;
    any_shadow |= item.shadow;
    any_op |= item.op != ItemOp::kCheck || !item.id.empty();
  }
  if (sync_items != 0 && sync_items != items.size()) {
    std::move(done)(absl::InvalidArgumentError(
        "limits in sync mode cannot be checked in one all-or-nothing request together with "
        "exact limits; check them separately"));
    return;
  }
  Store& store = sync_items != 0 ? *state_->sync_store : *state_->store;
  // What the answer needs of the items once the store has them: which ones decide the batch
  // and, for the reservations, what their tokens name. Kept only when there is more to it
  // than "every item decides".
  struct Kept {
    std::vector<CheckItem> items;  // without keys, except for reservations
  };
  std::shared_ptr<Kept> kept;
  if (any_op || any_shadow) {
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
  store.ApplyAsync(std::move(items), [done = std::move(done), kept = std::move(kept)](
                                         absl::StatusOr<std::vector<Decision>> decisions) mutable {
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
  });
}

void Limiter::ApplyOne(const Limit& limit, std::string_view key, int64_t cost, ItemOp op,
                       std::string id, DecisionCallback done) {
  std::vector<CheckItem> items;
  items.push_back(CheckItem{&limit, std::string(key), cost});
  items.back().op = op;
  items.back().id = std::move(id);
  ApplyItems(std::move(items),
             [done = std::move(done)](absl::StatusOr<MultiDecision> result) mutable {
               std::move(done)(internal::SingleDecision(std::move(result)));
             });
}

}  // namespace tollgate
