// Copyright tollgate authors. The embedded in-memory store.
#ifndef TOLLGATE_MEMORY_STORE_H_
#define TOLLGATE_MEMORY_STORE_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tollgate/clock.h"
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

// State for every (limit, key) in this process's memory. An entry disappears once its bucket
// would be full again (token bucket) or its window has no influence left (windows): expired
// entries are swept a few at a time on every check, and all at once by `Sweep()`.
// Each check is O(1) amortized (O(log n) for the expiry heap). Thread-safe.
class MemoryStore : public Store {
 public:
  static absl::StatusOr<std::unique_ptr<MemoryStore>> Create(MemoryStoreOptions options = {});

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
};

}  // namespace tollgate

#endif  // TOLLGATE_MEMORY_STORE_H_
