// Copyright tollgate authors. MemoryStore's implementation, and what its callers inside the
// project (the Limiter through Store::PrepareCheck, the benchmarks, the tests) use beyond the
// public header: prepared limits and CheckEach.
#ifndef TOLLGATE_SRC_STORE_MEMORY_MEMORY_STORE_IMPL_H_
#define TOLLGATE_SRC_STORE_MEMORY_MEMORY_STORE_IMPL_H_

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "src/store/memory/limit_rule.h"
#include "src/store/memory/record.h"
#include "src/store/memory/shard.h"
#include "tollgate/clock.h"
#include "tollgate/decision.h"
#include "tollgate/limit.h"
#include "tollgate/memory_store.h"
#include "tollgate/store.h"

namespace tollgate::memory {

class MemoryStoreImpl;

// A limit made ready, once, for the checks of one MemoryStoreImpl: its numbers checked, its
// name hashed and its rule computed (LimitRule), all of which a check by Limit repeats every
// time. CheckOne(prepared, key, cost) decides exactly as CheckOne(prepared.limit(), key, cost)
// would, on the same entries.
//
// A snapshot: it holds a copy of the limit, so later changes to the Limit it was made from do
// not reach it (prepare again). Immutable and usable from any thread; valid only with the
// store that prepared it (another store, or a default-constructed one, answers
// InvalidArgument).
class PreparedLimit {
 public:
  PreparedLimit() = default;

  // The limit as it was when prepared.
  const Limit& limit() const { return limit_; }

 private:
  friend class MemoryStoreImpl;

  Limit limit_;
  const MemoryStoreImpl* store_ = nullptr;
  uint64_t name_hash_ = 0;  // NameHash(store's seed, limit_.name)
  LimitRule rule_;
};

// State for every (limit, key) in this process's memory (see MemoryStore), in shards: a key's
// hash picks its shard, and each shard (table, expiry heap, its share of max_keys) has its own
// lock. Every check locks one shard; an all-or-nothing batch locks each of its items' shards,
// in address order, so batches sharing shards cannot deadlock.
//
// Every path decides the same way: an operation (limit_rule.h) on the entry's state, and what
// it consumed kept in the shard, at a time taken under the shard's lock: the later of the
// clock read for the check and the shard's latest decision time. Thread-safe.
class MemoryStoreImpl final : public MemoryStore {
 public:
  // REQUIRES: shards a power of two in [1, max_keys]; clock non-null and outlives the store.
  // MemoryStore::Create checks and rounds the options.
  MemoryStoreImpl(Clock* clock, int shards, int64_t max_keys);

  // MemoryStore::Create's store, as this type.
  static absl::StatusOr<std::unique_ptr<MemoryStoreImpl>> Create(MemoryStoreOptions options = {});

  // Store. Every op but kAdd (Unimplemented: this store is never unreachable), as Store
  // says: the unconditional items (charges, settles, releases, renewals) applied first, in
  // order, whatever the batch does; the checks (reservations and leases taken included) then
  // all or nothing on what they leave. Reservation records and lease sets live in each
  // shard's side tables (side_table.h), beside the key's entry. A batch of plain checks of
  // rate limits takes a shorter path (CheckRates).
  void ApplyAsync(std::vector<CheckItem> items, CheckCallback done) override;
  // Prepare(limit) behind the Store interface, or nullptr if the limit's numbers are invalid.
  std::unique_ptr<PreparedCheck> PrepareCheck(const Limit& limit) override;
  std::string_view Name() const override { return "memory"; }

  // One kCheck of `limit` for `key`: Apply({{&limit, key, cost}})'s decision, without the
  // vectors. REQUIRES: `limit` outlives the call; key non-empty; cost >= 0 (else
  // InvalidArgument).
  absl::StatusOr<Decision> CheckOne(const Limit& limit, std::string_view key, int64_t cost);

  // MemoryStore.
  int64_t Size() const override;
  int64_t Sweep() override;
  int64_t Evictions() const override;

  // `limit`, ready for CheckOne(const PreparedLimit&, ...) on this store. InvalidArgument if
  // its numbers are invalid (as any check of it would answer).
  absl::StatusOr<PreparedLimit> Prepare(const Limit& limit) const;

  // CheckOne(limit.limit(), key, cost), without the work Prepare did. InvalidArgument for an
  // empty key, a negative cost, or a limit this store did not prepare.
  absl::StatusOr<Decision> CheckOne(const PreparedLimit& limit, std::string_view key, int64_t cost);

  // Decides each item on its own, exactly as CheckOne(*item.limit, item.key, item.cost) for
  // each in turn would: not all or nothing (ApplyAsync is), and a key named twice sees its
  // earlier item's consumption. decisions[i] gets item i's decision or its error. For batches
  // of independent requests (those an event loop found ready together): the entries of up to
  // kEachGroup items are fetched from memory before the first of them is decided, so their
  // cache misses overlap, and the group is decided at one reading of the clock.
  // If decisions.size() != items.size(), nothing is checked and every decision is an
  // InvalidArgument error.
  void CheckEach(absl::Span<const CheckItem> items, absl::Span<absl::StatusOr<Decision>> decisions);
  static constexpr size_t kEachGroup = 16;

 private:
  KeyView KeyOf(std::string_view name, uint64_t name_hash, std::string_view key) const {
    return KeyView{name, key, KeyHash(name_hash, key)};
  }
  KeyView KeyOf(const CheckItem& item) const {
    return KeyOf(item.limit->name, NameHash(seed_, item.limit->name), item.key);
  }
  Shard& ShardFor(size_t hash) const;

  // `operation` (limit_rule.h) on one entry, at the later of read() and its shard's latest
  // decision time; what it consumed is kept. The key's entry is prefetched before read() and
  // the lock.
  template <typename Operation, typename ReadClock>
  Decision ApplyOne(const LimitRule& rule, const KeyView& key, const Operation& operation,
                    ReadClock read);

  // Items of any op (possibly in several shards, possibly naming one key more than once), as
  // ApplyAsync decides them, at one time. REQUIRES: rules[i] is ItemRuleFor(items[i]);
  // decisions.size() == items.size().
  void ApplyAll(const std::vector<CheckItem>& items, absl::Span<const ItemRule> rules,
                std::vector<Decision>& decisions);

  // A batch of kCheck items of rate limits without ids, all or nothing.
  void CheckRates(const std::vector<CheckItem>& items, CheckCallback done);

  // CheckOne of a concurrency limit (cost 0 peeks at its slots), through ApplyAll.
  absl::StatusOr<Decision> CheckLeases(const Limit& limit, std::string_view key, int64_t cost);

  int64_t Now() const { return clock_->NowMicros(); }

  Clock* const clock_;
  // Seeds every key's hash: differs between stores and processes.
  const uint64_t seed_;
  const std::unique_ptr<Shard[]> shards_;
  const int shard_count_;
};

}  // namespace tollgate::memory

#endif  // TOLLGATE_SRC_STORE_MEMORY_MEMORY_STORE_IMPL_H_
