// Copyright tollgate authors.
#include "src/store/memory/memory_store_impl.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "src/core/batch.h"

namespace tollgate::memory {
namespace {

constexpr int kMaxShards = 1 << 16;

// `limit`'s rule for a check of `key` at `cost`, or why the check cannot be decided.
absl::StatusOr<LimitRule> RuleForItem(const Limit* limit, std::string_view key, int64_t cost) {
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

void MemoryStoreImpl::CheckAll(const std::vector<CheckItem>& items,
                               absl::Span<const LimitRule> rules,
                               std::vector<Decision>& decisions) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  struct Pending {
    KeyView key;
    Shard* shard = nullptr;
    Step step;
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

  for (size_t i = 0; i < items.size(); ++i) {
    Pending& p = pending[i];
    // A key named earlier in this batch sees that item's tentative state.
    const AnyState* state = nullptr;
    for (size_t j = i; j-- > 0;) {
      if (pending[j].key == p.key) {
        state = &pending[j].step.state;
        break;
      }
    }
    AnyState stored;
    if (state == nullptr) {
      if (const Record* entry = p.shard->Find(p.key); entry != nullptr) {
        stored = entry->state();
        state = &stored;
      }
    }
    p.step = Apply(rules[i], state, now, CheckOperation{items[i].cost});
    // A refused shadow item does not refuse the batch and consumes nothing.
    if (!p.step.decision.allowed && items[i].shadow) p.step.changed = false;
    decisions[i] = p.step.decision;
  }

  if (internal::BatchAllowed(items, decisions)) {
    for (const Pending& p : pending) {
      if (p.step.changed) p.shard->Put(p.key, p.step.state, p.step.expires_at_micros, now);
    }
  } else {
    internal::GiveBackUncharged(items, absl::MakeSpan(decisions));
  }
  for (auto it = locked.rbegin(); it != locked.rend(); ++it) (*it)->mu().Unlock();
}

void MemoryStoreImpl::CheckAsync(std::vector<CheckItem> items, CheckCallback done) {
  absl::InlinedVector<LimitRule, 4> rules;
  rules.reserve(items.size());
  for (const CheckItem& item : items) {
    absl::StatusOr<LimitRule> rule = RuleForItem(item.limit, item.key, item.cost);
    if (!rule.ok()) {
      std::move(done)(std::move(rule).status());
      return;
    }
    rules.push_back(*rule);
  }
  if (items.empty()) {
    std::move(done)(absl::InvalidArgumentError("no check items"));
    return;
  }
  std::vector<Decision> decisions(items.size());
  if (items.size() == 1) {
    decisions[0] = ApplyOne(rules[0], KeyOf(items[0]), CheckOperation{items[0].cost},
                            [this] { return Now(); });
  } else {
    CheckAll(items, rules, decisions);
  }
  std::move(done)(std::move(decisions));
}

absl::StatusOr<Decision> MemoryStoreImpl::CheckOne(const Limit& limit, std::string_view key,
                                                   int64_t cost) {
  absl::StatusOr<LimitRule> rule = RuleForItem(&limit, key, cost);
  if (!rule.ok()) return std::move(rule).status();
  return ApplyOne(*rule, KeyOf(limit.name, NameHash(seed_, limit.name), key), CheckOperation{cost},
                  [this] { return Now(); });
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
        decisions[start + i] = rules[i].status();
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
