// Copyright tollgate authors. The embedded in-memory store.
#ifndef TOLLGATE_MEMORY_STORE_H_
#define TOLLGATE_MEMORY_STORE_H_

#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tollgate/clock.h"
#include "tollgate/decision.h"
#include "tollgate/limit.h"
#include "tollgate/store.h"

namespace tollgate {

struct MemoryStoreOptions {
  // Time source. nullptr means SystemClock(). REQUIRES: outlives the store.
  Clock* clock = nullptr;
  // Independent shards, each with its own lock. Rounded up to a power of two.
  int shards = 64;
  // Upper bound on live entries (one per limit and key). At the bound, a new key evicts the
  // entry of its shard that would expire soonest (the bucket closest to full again), so a
  // flood of random keys cannot exhaust memory; the evicted key's next check sees a fresh
  // (full) bucket. Evictions are counted in `MemoryStore::Evictions()`.
  int64_t max_keys = 1'000'000;
};

class MemoryStore;

// A limit made ready, once, for the checks of one MemoryStore: its numbers checked, its
// name hashed and the token bucket's durations (or the sliding window's 1 / window)
// computed, all of which a check by `Limit` repeats every time. For a server that checks the same
// few limits over and over (its configured ones, typically): `CheckOne(prepared, key, cost)`
// decides exactly as `CheckOne(prepared.limit(), key, cost)` would, on the same entries, with less
// work.
//
// A snapshot: it holds a copy of the limit, so later changes to the Limit it was made from
// do not reach it (prepare again). Cheap to copy, immutable, usable from any thread; valid
// only with the store that prepared it (another store answers InvalidArgument).
class PreparedLimit {
 public:
  // The limit as it was when prepared.
  const Limit& limit() const { return limit_; }

 private:
  friend class MemoryStore;

  Limit limit_;
  const MemoryStore* store_ = nullptr;
  // The store's key hash, advanced over the name: a check hashes only the key from here.
  uint64_t name_hash_ = 0;
  // Token bucket: capacity x 1e6 / rate, 1e6 / rate and rate / 1e6 (the algorithm's
  // TokenBucketTimes); 0 for the windows.
  double fill_micros_ = 0;
  double unit_micros_ = 0;
  double tokens_per_micro_ = 0;
  // Sliding window: 1 / window (the algorithm's PerWindow); 0 for the others.
  double per_window_ = 0;
};

// State for every (limit, key) in this process's memory. An entry disappears once its bucket
// would be full again (token bucket) or its window has no influence left (windows): expired
// entries are swept a few at a time on every check, and all at once by `Sweep()`.
// Each check is O(1) amortized (O(log n) for the expiry heap). Thread-safe.
class MemoryStore : public Store {
 public:
  static absl::StatusOr<std::unique_ptr<MemoryStore>> Create(MemoryStoreOptions options = {});

  using Store::CheckOne;

  // `limit`, ready for CheckOne(const PreparedLimit&, ...) on this store. InvalidArgument if
  // its numbers are invalid (as any check of it would answer).
  virtual absl::StatusOr<PreparedLimit> Prepare(const Limit& limit) const = 0;

  // CheckOne(limit.limit(), key, cost), without the work Prepare did. InvalidArgument for an
  // empty key, a negative cost, or a limit another store prepared.
  virtual absl::StatusOr<Decision> CheckOne(const PreparedLimit& limit, std::string_view key,
                                            int64_t cost) = 0;

  // Decides each item on its own, exactly as CheckOne(*item.limit, item.key, item.cost) for
  // each in turn would: not all or nothing (use CheckAsync for that), and a key named twice
  // sees its earlier item's consumption. decisions[i] gets item i's decision, or its error
  // (invalid numbers, empty key, negative cost). For batches of independent requests, such
  // as the requests an event loop found ready together: in a store larger than the caches,
  // every item's entry is fetched from memory before the first item is decided, so their
  // cache misses overlap instead of following each other. Items arrive together and are
  // decided at one instant of the call: the clock is read once per group of 16 items.
  // If decisions.size() != items.size(), nothing is checked and every decision is an
  // InvalidArgument error.
  virtual void CheckEach(absl::Span<const CheckItem> items,
                         absl::Span<absl::StatusOr<Decision>> decisions) = 0;

  // Live entries, including expired ones not yet swept.
  virtual int64_t Size() const = 0;
  // Removes every expired entry now. Returns how many were removed.
  virtual int64_t Sweep() = 0;
  // Entries evicted because the store was at `max_keys`.
  virtual int64_t Evictions() const = 0;

 protected:
  // Prepare(limit) behind the Store interface: CheckOne(prepared, key, cost) on this store.
  std::unique_ptr<PreparedCheck> PrepareCheck(const Limit& limit) override;

  // For implementations: what a PreparedLimit holds.
  static PreparedLimit MakePrepared(const Limit& limit, const MemoryStore* store,
                                    uint64_t name_hash, double fill_micros, double unit_micros,
                                    double tokens_per_micro, double per_window) {
    PreparedLimit prepared;
    prepared.limit_ = limit;
    prepared.store_ = store;
    prepared.name_hash_ = name_hash;
    prepared.fill_micros_ = fill_micros;
    prepared.unit_micros_ = unit_micros;
    prepared.tokens_per_micro_ = tokens_per_micro;
    prepared.per_window_ = per_window;
    return prepared;
  }
  static const MemoryStore* StoreOf(const PreparedLimit& limit) { return limit.store_; }
  static uint64_t NameHashOf(const PreparedLimit& limit) { return limit.name_hash_; }
  static double FillMicrosOf(const PreparedLimit& limit) { return limit.fill_micros_; }
  static double UnitMicrosOf(const PreparedLimit& limit) { return limit.unit_micros_; }
  static double TokensPerMicroOf(const PreparedLimit& limit) { return limit.tokens_per_micro_; }
  static double PerWindowOf(const PreparedLimit& limit) { return limit.per_window_; }
};

}  // namespace tollgate

#endif  // TOLLGATE_MEMORY_STORE_H_
