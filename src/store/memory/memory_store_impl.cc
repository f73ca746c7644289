// Copyright tollgate authors.
#include "src/store/memory/memory_store_impl.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/container/inlined_vector.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "src/core/batch.h"

namespace tollgate::memory {
namespace {

constexpr int kMaxShards = 1 << 16;

// `limit`'s rule for a check of `key` at `cost`, or why the check cannot be decided. Always
// inlined: it is on the path of every check by Limit.
ABSL_ATTRIBUTE_ALWAYS_INLINE absl::StatusOr<LimitRule> RuleForItem(const Limit* limit,
                                                                   std::string_view key,
                                                                   int64_t cost) {
  if (limit == nullptr) return absl::InvalidArgumentError("check item without a limit");
  if (key.empty()) return absl::InvalidArgumentError("empty key");
  if (cost < 0) return absl::InvalidArgumentError("negative cost");
  return RuleFor(*limit);
}

// A PreparedLimit behind the Store interface (Store::PrepareCheck).
class MemoryPreparedCheck final : public PreparedCheck {
 public:
  MemoryPreparedCheck(MemoryStoreImpl* store, PreparedLimit prepared)
      : store_(store), prepared_(std::move(prepared)) {}

  absl::StatusOr<Decision> CheckOne(std::string_view key, int64_t cost) override {
    return store_->CheckOne(prepared_, key, cost);
  }

 private:
  MemoryStoreImpl* const store_;
  const PreparedLimit prepared_;
};

// `item`'s step on its concurrency limit's lease set `state` (nullopt: none) at `now`.
algorithm::Outcome<algorithm::ConcurrencyState> LeaseStep(
    const algorithm::ConcurrencyParams& params,
    const std::optional<algorithm::ConcurrencyState>& state, int64_t now, const CheckItem& item) {
  switch (item.op) {
    case ItemOp::kRelease:
      return algorithm::ConcurrencyRelease(state, now, params, item.id);
    case ItemOp::kRenew:
      return algorithm::ConcurrencyRenew(state, now, params, item.id);
    default:
      return algorithm::ConcurrencyAcquire(state, now, params, item.id, item.cost);
  }
}

// `item`'s step on its rate limit's `state` (nullptr: none) at `now`; a settle finds (and marks)
// its reservation's record in `shard`, the key's. REQUIRES: shard.mu() held.
Step RateStep(const LimitRule& rule, const AnyState* state, int64_t now, const CheckItem& item,
              Shard& shard) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  switch (item.op) {
    case ItemOp::kCharge:
      return memory::Apply(rule, state, now, ChargeOperation{item.cost});
    case ItemOp::kSettle: {
      ReservationRecord* record =
          shard.reservations().Find(ReservationKey(item.limit->name, item.key, item.id), now);
      if (record == nullptr || record->settled) {
        // Nothing to settle: the decision is a peek, and says why.
        Step step = memory::Apply(rule, state, now, CheckOperation{0});
        step.changed = false;
        step.decision.allowed = false;
        step.decision.reason =
            record == nullptr ? DenyReason::kNotFound : DenyReason::kAlreadySettled;
        return step;
      }
      // Kept as settled until its TTL, so a second settle is told, not applied.
      record->settled = true;
      return memory::Apply(
          rule, state, now,
          SettleOperation{record->reserved, record->reserved_at_micros, item.cost});
    }
    default:  // kCheck, kReserve
      return memory::Apply(rule, state, now, CheckOperation{item.cost});
  }
}

}  // namespace

MemoryStoreImpl::MemoryStoreImpl(Clock* clock, int shards, int64_t max_keys)
    : clock_(clock),
      seed_(absl::HashOf(reinterpret_cast<uintptr_t>(this))),
      shards_(std::make_unique<Shard[]>(shards)),
      shard_count_(shards) {
  // The caps add up to exactly max_keys, each at least 1.
  for (int i = 0; i < shards; ++i) {
    absl::MutexLock lock(&shards_[i].mu());
    shards_[i].Init(seed_, max_keys / shards + (i < max_keys % shards ? 1 : 0));
  }
}

absl::StatusOr<std::unique_ptr<MemoryStoreImpl>> MemoryStoreImpl::Create(
    MemoryStoreOptions options) {
  if (options.shards < 1 || options.shards > kMaxShards) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory store shards must be in [1, ", kMaxShards, "], got ", options.shards));
  }
  if (options.max_keys < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory store max_keys must be >= 1, got ", options.max_keys));
  }
  int shards = 1;
  while (shards < options.shards) shards *= 2;
  // Every shard must be able to hold at least one entry, or its keys could not be limited.
  while (shards > options.max_keys) shards /= 2;
  Clock* clock = options.clock != nullptr ? options.clock : &SystemClock();
  return std::make_unique<MemoryStoreImpl>(clock, shards, options.max_keys);
}

Shard& MemoryStoreImpl::ShardFor(size_t hash) const {
  // The table uses the hash's low bits; the shard takes high ones, so the keys within one
  // shard still spread over the whole table.
  return shards_[(hash >> 48) & static_cast<size_t>(shard_count_ - 1)];
}

template <typename Operation, typename ReadClock>
Decision MemoryStoreImpl::ApplyOne(const LimitRule& rule, const KeyView& key,
                                   const Operation& operation, ReadClock read) {
  Shard& shard = ShardFor(key.hash);
  shard.Prefetch(key.hash);
  const int64_t read_micros = read();
  absl::MutexLock lock(&shard.mu());
  const int64_t now = std::max(read_micros, shard.latest_micros());
  shard.StartDecisionsAt(now);
  Record* entry = shard.Find(key);
  return std::visit(
      [&](const auto& r) {
        using State = typename std::decay_t<decltype(r)>::State;
        const algorithm::Outcome<State> outcome =
            operation(r, entry != nullptr ? entry->Get<State>() : std::nullopt, now);
        if (outcome.decision.allowed && outcome.changed) {
          if (entry != nullptr) {
            entry->Set(outcome.state);
            entry->expires_at_micros = outcome.expires_at_micros;
          } else {
            shard.Put(key, outcome.state, outcome.expires_at_micros, now);
          }
        }
        return outcome.decision;
      },
      rule);
}

void MemoryStoreImpl::ApplyAll(const std::vector<CheckItem>& items,
                               absl::Span<const ItemRule> rules,
                               std::vector<Decision>& decisions) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  struct Pending {
    KeyView key;
    Shard* shard = nullptr;
    Step step;                                               // a rate limit's
    algorithm::Outcome<algorithm::ConcurrencyState> leases;  // a concurrency limit's
  };
  absl::InlinedVector<Pending, 4> pending(items.size());
  absl::InlinedVector<Shard*, 4> locked;
  for (size_t i = 0; i < items.size(); ++i) {
    pending[i].key = KeyOf(items[i]);
    pending[i].shard = &ShardFor(pending[i].key.hash);
    pending[i].shard->Prefetch(pending[i].key.hash);
    locked.push_back(pending[i].shard);
  }
  const int64_t read = Now();
  // Every caller locks in ascending address order.
  std::sort(locked.begin(), locked.end());
  locked.erase(std::unique(locked.begin(), locked.end()), locked.end());
  int64_t now = read;
  for (Shard* shard : locked) {
    shard->mu().Lock();
    now = std::max(now, shard->latest_micros());
  }
  for (Shard* shard : locked) shard->StartDecisionsAt(now);

  // The unconditional items first, in order, then the checks (Store::ApplyAsync).
  absl::InlinedVector<size_t, 4> order;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!IsConditional(items[i].op)) order.push_back(i);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    if (IsConditional(items[i].op)) order.push_back(i);
  }
  for (size_t n = 0; n < order.size(); ++n) {
    const size_t i = order[n];
    const CheckItem& item = items[i];
    Pending& p = pending[i];
    // A key decided earlier in this batch sees that item's tentative state.
    const Pending* earlier = nullptr;
    for (size_t m = n; m-- > 0;) {
      if (pending[order[m]].key == p.key && rules[order[m]].concurrency == rules[i].concurrency) {
        earlier = &pending[order[m]];
        break;
      }
    }
    Decision* decision = nullptr;
    if (rules[i].concurrency) {
      std::optional<algorithm::ConcurrencyState> state;
      if (earlier != nullptr) {
        state = earlier->leases.state;
      } else if (const LeaseSet* set =
                     p.shard->leases().Find(LeaseSetKey(p.key.name, p.key.key), now);
                 set != nullptr) {
        state = set->state;
      }
      p.leases = LeaseStep(rules[i].leases, state, now, item);
      decision = &p.leases.decision;
    } else {
      const AnyState* state = earlier != nullptr ? &earlier->step.state : nullptr;
      AnyState stored;
      if (earlier == nullptr) {
        if (const Record* entry = p.shard->Find(p.key); entry != nullptr) {
          stored = entry->state();
          state = &stored;
        }
      }
      p.step = RateStep(rules[i].rate, state, now, item, *p.shard);
      decision = &p.step.decision;
    }
    decision->source = DecisionSource::kMemory;
    // A refused shadow item does not refuse the batch and consumes nothing.
    if (!decision->allowed && item.shadow) p.step.changed = p.leases.changed = false;
    decisions[i] = *decision;
  }

  // In the order decided, so a key's last step is what stays; a refused batch keeps only
  // its unconditional items.
  const bool allowed = internal::BatchAllowed(items, decisions);
  for (const size_t i : order) {
    const CheckItem& item = items[i];
    const Pending& p = pending[i];
    if (!allowed && IsConditional(item.op)) continue;
    if (rules[i].concurrency) {
      if (p.leases.changed) {
        p.shard->leases().Put(LeaseSetKey(p.key.name, p.key.key),
                              LeaseSet{p.leases.state, p.leases.expires_at_micros}, now);
      }
      continue;
    }
    if (p.step.changed) p.shard->Put(p.key, p.step.state, p.step.expires_at_micros, now);
    if (item.op == ItemOp::kReserve && decisions[i].allowed) {
      p.shard->reservations().Put(
          ReservationKey(p.key.name, p.key.key, item.id),
          ReservationRecord{item.cost, now, false, now + item.limit->reservation_ttl_micros}, now);
    }
  }
  if (!allowed) internal::GiveBackUncharged(items, absl::MakeSpan(decisions));
  for (auto it = locked.rbegin(); it != locked.rend(); ++it) (*it)->mu().Unlock();
}

void MemoryStoreImpl::CheckRates(const std::vector<CheckItem>& items, CheckCallback done) {
  absl::InlinedVector<ItemRule, 4> rules;
  rules.reserve(items.size());
  for (const CheckItem& item : items) {
    absl::StatusOr<LimitRule> rule = RuleForItem(item.limit, item.key, item.cost);
    if (!rule.ok()) {
      std::move(done)(std::move(rule).status());
      return;
    }
    rules.push_back(ItemRule{.rate = *rule});
  }
  std::vector<Decision> decisions(items.size());
  if (items.size() == 1) {
    decisions[0] = ApplyOne(rules[0].rate, KeyOf(items[0]), CheckOperation{items[0].cost},
                            [this] { return Now(); });
  } else {
    ApplyAll(items, rules, decisions);
  }
  std::move(done)(std::move(decisions));
}

void MemoryStoreImpl::ApplyAsync(std::vector<CheckItem> items, CheckCallback done) {
  if (items.empty()) {
    std::move(done)(absl::InvalidArgumentError("no check items"));
    return;
  }
  bool rate_checks = true;
  for (const CheckItem& item : items) {
    if (item.op == ItemOp::kAdd) {
      std::move(done)(absl::UnimplementedError(
          "the memory store adds no consumption from elsewhere (kAdd): it is never unreachable"));
      return;
    }
    rate_checks = rate_checks && (item.limit == nullptr ||
                                  (item.op == ItemOp::kCheck && item.id.empty() &&
                                   item.limit->numbers.algorithm != Algorithm::kConcurrency));
  }
  if (rate_checks) {
    CheckRates(items, std::move(done));
    return;
  }
  absl::InlinedVector<ItemRule, 4> rules;
  rules.reserve(items.size());
  for (const CheckItem& item : items) {
    absl::StatusOr<ItemRule> rule = ItemRuleFor(item);
    if (!rule.ok()) {
      std::move(done)(std::move(rule).status());
      return;
    }
    rules.push_back(*std::move(rule));
  }
  std::vector<Decision> decisions(items.size());
  if (items.size() == 1 && !rules[0].concurrency && items[0].op == ItemOp::kCharge) {
    decisions[0] = ApplyOne(rules[0].rate, KeyOf(items[0]), ChargeOperation{items[0].cost},
                            [this] { return Now(); });
  } else {
    ApplyAll(items, rules, decisions);
  }
  std::move(done)(std::move(decisions));
}

absl::StatusOr<Decision> MemoryStoreImpl::CheckOne(const Limit& limit, std::string_view key,
                                                   int64_t cost) {
  absl::StatusOr<LimitRule> rule = RuleForItem(&limit, key, cost);
  if (!rule.ok()) {
    if (limit.numbers.algorithm == Algorithm::kConcurrency) return CheckLeases(limit, key, cost);
    return std::move(rule).status();
  }
  return ApplyOne(*rule, KeyOf(limit.name, NameHash(seed_, limit.name), key), CheckOperation{cost},
                  [this] { return Now(); });
}

absl::StatusOr<Decision> MemoryStoreImpl::CheckLeases(const Limit& limit, std::string_view key,
                                                      int64_t cost) {
  absl::StatusOr<std::vector<Decision>> decisions =
      Apply({CheckItem{&limit, std::string(key), cost}});
  if (!decisions.ok()) return std::move(decisions).status();
  return decisions->front();
}

absl::StatusOr<PreparedLimit> MemoryStoreImpl::Prepare(const Limit& limit) const {
  absl::StatusOr<LimitRule> rule = RuleFor(limit);
  if (!rule.ok()) return std::move(rule).status();
  PreparedLimit prepared;
  prepared.limit_ = limit;
  prepared.store_ = this;
  prepared.name_hash_ = NameHash(seed_, limit.name);
  prepared.rule_ = *rule;
  return prepared;
}

absl::StatusOr<Decision> MemoryStoreImpl::CheckOne(const PreparedLimit& limit, std::string_view key,
                                                   int64_t cost) {
  if (limit.store_ != this) {
    return absl::InvalidArgumentError(absl::StrCat(
        "limit \"", limit.limit_.name, "\" was prepared by another store (or not at all)"));
  }
  if (key.empty()) return absl::InvalidArgumentError("empty key");
  if (cost < 0) return absl::InvalidArgumentError("negative cost");
  return ApplyOne(limit.rule_, KeyOf(limit.limit_.name, limit.name_hash_, key),
                  CheckOperation{cost}, [this] { return Now(); });
}

std::unique_ptr<PreparedCheck> MemoryStoreImpl::PrepareCheck(const Limit& limit) {
  absl::StatusOr<PreparedLimit> prepared = Prepare(limit);
  if (!prepared.ok()) return nullptr;
  return std::make_unique<MemoryPreparedCheck>(this, *std::move(prepared));
}

void MemoryStoreImpl::CheckEach(absl::Span<const CheckItem> items,
                                absl::Span<absl::StatusOr<Decision>> decisions) {
  if (decisions.size() != items.size()) {
    const absl::Status mismatch = absl::InvalidArgumentError(absl::StrCat(
        "CheckEach: ", items.size(), " items but room for ", decisions.size(), " decisions"));
    for (absl::StatusOr<Decision>& decision : decisions) decision = mismatch;
    return;
  }
  KeyView keys[kEachGroup];
  absl::StatusOr<LimitRule> rules[kEachGroup];
  for (size_t start = 0; start < items.size(); start += kEachGroup) {
    const size_t count = std::min(items.size() - start, kEachGroup);
    for (size_t i = 0; i < count; ++i) {
      const CheckItem& item = items[start + i];
      rules[i] = RuleForItem(item.limit, item.key, item.cost);
      if (!rules[i].ok()) continue;
      keys[i] = KeyOf(item);
      ShardFor(keys[i].hash).Prefetch(keys[i].hash);
    }
    const int64_t read = Now();
    for (size_t i = 0; i < count; ++i) {
      if (!rules[i].ok()) {
        const CheckItem& item = items[start + i];
        decisions[start + i] =
            item.limit != nullptr && item.limit->numbers.algorithm == Algorithm::kConcurrency
                ? CheckLeases(*item.limit, item.key, item.cost)
                : rules[i].status();
        continue;
      }
      decisions[start + i] = ApplyOne(*rules[i], keys[i], CheckOperation{items[start + i].cost},
                                      [read] { return read; });
    }
  }
}

int64_t MemoryStoreImpl::Size() const {
  int64_t size = 0;
  for (int i = 0; i < shard_count_; ++i) {
    absl::MutexLock lock(&shards_[i].mu());
    size += shards_[i].size();
  }
  return size;
}

int64_t MemoryStoreImpl::Sweep() {
  const int64_t now = Now();
  int64_t removed = 0;
  for (int i = 0; i < shard_count_; ++i) {
    absl::MutexLock lock(&shards_[i].mu());
    removed += shards_[i].Sweep(now);
  }
  return removed;
}

int64_t MemoryStoreImpl::Evictions() const {
  int64_t evictions = 0;
  for (int i = 0; i < shard_count_; ++i) {
    absl::MutexLock lock(&shards_[i].mu());
    evictions += shards_[i].evictions();
  }
  return evictions;
}

}  // namespace tollgate::memory

namespace tollgate {

absl::StatusOr<std::unique_ptr<MemoryStore>> MemoryStore::Create(MemoryStoreOptions options) {
  absl::StatusOr<std::unique_ptr<memory::MemoryStoreImpl>> store =
      memory::MemoryStoreImpl::Create(options);
  if (!store.ok()) return std::move(store).status();
  return std::unique_ptr<MemoryStore>(std::move(*store));
}

}  // namespace tollgate
