// Copyright tollgate authors. The embedded in-memory store.
#ifndef TOLLGATE_MEMORY_STORE_H_
#define TOLLGATE_MEMORY_STORE_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "tollgate/clock.h"
#include "tollgate/store.h"

namespace tollgate {

struct MemoryStoreOptions {
  // Time source. nullptr means SystemClock(). REQUIRES: outlives the store.
  Clock* clock = nullptr;
  // Independent shards, each with its own lock. Rounded up to a power of two (and down to at
  // most max_keys).
  int shards = 64;
  // Upper bound on live entries (one per limit and key). At the bound, a new key evicts the
  // entry of its shard that would expire soonest (the bucket closest to full again), so a
  // flood of random keys cannot exhaust memory; the evicted key's next check sees a fresh
  // (full) bucket. Evictions are counted in `MemoryStore::Evictions()`.
  int64_t max_keys = 1'000'000;
};

// State for every (limit, key) in this process's memory: a Store whose batches are decided
// before ApplyAsync (or a PreparedCheck) returns, with `source` kMemory. An entry disappears
// once its bucket would be full again (token bucket) or its window has no influence left (windows):
// expired entries are removed a few at a time by every check, and all at once by `Sweep()`.
// Each check is O(log n) at worst (the expiry heap), O(1) for a key that is already there.
//
// Decisions that share state are made in time order: a check never decides at a time earlier
// than one a check of the same entries already decided at, even when the clock steps back.
// Thread-safe.
class MemoryStore : public Store {
 public:
  // InvalidArgument for shards outside [1, 65536] or max_keys < 1.
  static absl::StatusOr<std::unique_ptr<MemoryStore>> Create(MemoryStoreOptions options = {});

  // Live entries, including expired ones not yet removed.
  virtual int64_t Size() const = 0;
  // Removes every expired entry now. Returns how many were removed.
  virtual int64_t Sweep() = 0;
  // Entries evicted because the store was at `max_keys`.
  virtual int64_t Evictions() const = 0;
};

}  // namespace tollgate

#endif  // TOLLGATE_MEMORY_STORE_H_
