// Copyright tollgate authors. Sync mode's request path: every tracked (limit, key) and the
// decisions made from them, with no Redis on the way.
//
// Entries (entry.h) live in `shards` hash maps, each behind its own lock. A check locks the
// shards of its items (in address order, so two checks cannot deadlock), decides every item
// from its entry and the time and N it is given, and undoes every consumption if one item is
// refused (all or nothing, shadow items as Store says). Keys beyond `max_keys` are decided by a
// local in-memory limiter at their floor (FirstShare(limit, N, shares) per window), never
// synced. Rounds take the due entries' units (TakeCounters) and hand back what Redis answered
// (Apply), one shard at a time.
//
// Time: windows come from the injected Clock plus the offset learned from Redis TIME
// (SetClockOffset); intervals and staleness from the Clock alone. Thread-safe.
#ifndef TOLLGATE_SRC_STORE_SYNC_KEY_TABLE_H_
#define TOLLGATE_SRC_STORE_SYNC_KEY_TABLE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "src/store/sync/entry.h"
#include "src/store/sync/round.h"
#include "tollgate/clock.h"
#include "tollgate/memory_store.h"
#include "tollgate/store.h"

namespace tollgate::sync {

struct KeyTableOptions {
  // REQUIRES: non-null, outlives the table.
  Clock* clock = nullptr;
  // Prepended to the counters' keys (KeyInfo::counter_base).
  std::string key_prefix = "tollgate:";
  // Upper bound on tracked entries. REQUIRES: >= 1.
  int64_t max_keys = 100'000;
  // Shards of the table. REQUIRES: a power of 2.
  int shards = 64;
  // A Redis Cluster: each key's counters go in the call of its hash slot (KeyInfo::slot);
  // otherwise every key is in one call.
  bool group_by_slot = false;
  // Called (on the checking thread, no lock held) when a key is first checked whose sync
  // interval is shorter than every one before; may be empty.
  std::function<void(int64_t interval_micros)> on_shorter_interval = nullptr;
};

class KeyTable {
 public:
  static absl::StatusOr<std::unique_ptr<KeyTable>> Create(KeyTableOptions options);
  KeyTable(const KeyTable&) = delete;
  KeyTable& operator=(const KeyTable&) = delete;
  ~KeyTable();

  // Decides `items` all or nothing (see Store), with decisions of source kSync. A limit not
  // in sync mode, or not valid there (ValidateLimit: a token bucket, invalid numbers, a sync
  // interval below 10 ms) is InvalidArgument naming the limit; so is an empty key or a
  // negative cost.
  absl::StatusOr<std::vector<Decision>> Check(const std::vector<CheckItem>& items);

  // What decisions are made with, set by the rounds.
  void SetInstances(int64_t instances);  // below 1 counts as 1
  void SetClockOffset(int64_t micros);   // Redis TIME minus the clock
  void SetLastSync(int64_t clock_micros);
  int64_t clock_offset_micros() const { return offset_micros_.load(std::memory_order_relaxed); }
  // The clock plus the offset: the time windows are measured in.
  int64_t NowMicros() const { return Now(clock_->NowMicros()); }

  // A round's counters (round.h, TakeCounters) from every entry due (every one with `force`),
  // rolled into the current window first; entries that are Forgettable are dropped.
  std::vector<CounterItem> TakeCounters(bool force);
  // Hands a call's answer back to its entries (round.h, ApplyReply): with `replies` (one per
  // item), `items` were the last batch of a call that Redis answered; without, they were
  // acknowledged without a reply to read, or given up.
  void Apply(const std::vector<CounterItem>& items, const std::vector<CounterReply>* replies);

  // The shortest sync interval of any key checked so far (1 s before the first).
  int64_t shortest_interval_micros() const {
    return shortest_interval_.load(std::memory_order_relaxed);
  }
  int64_t keys_tracked() const { return keys_tracked_.load(std::memory_order_relaxed); }
  int64_t keys_synced() const { return keys_synced_.load(std::memory_order_relaxed); }
  int64_t overflow_decisions() const { return overflow_decisions_.load(std::memory_order_relaxed); }
  int64_t dropped_units() const { return dropped_units_.load(std::memory_order_relaxed); }
  void AddDroppedUnits(int64_t units);

 private:
  struct Shard;
  struct Pending;
  KeyTable(KeyTableOptions options, std::unique_ptr<MemoryStore> overflow);

  int64_t Now(int64_t clock_micros) const {
    return clock_micros + offset_micros_.load(std::memory_order_relaxed);
  }
  DecideContext Context(int64_t clock_micros) const;
  Shard& ShardFor(size_t hash) const;
  // One item whose key is tracked already: one lock, one hash, no allocation for keys up to
  // 255 bytes. nullopt when the key is new (CheckBatch creates it).
  std::optional<Decision> CheckTracked(const CheckItem& item);
  // Locks a variable set of shards (in address order).
  std::vector<Decision> CheckBatch(const std::vector<CheckItem>& items)
      ABSL_NO_THREAD_SAFETY_ANALYSIS;
  // Items of keys beyond max_keys: the first share per window, never synced. Returns whether
  // every such item passed (consumed only then, and only unless `peek`).
  bool CheckOverflow(const std::vector<CheckItem>& items, const std::vector<Pending>& pending,
                     int64_t instances, bool peek, std::vector<Decision>& decisions);
  std::shared_ptr<const KeyInfo> MakeInfo(const CheckItem& item) const;
  void LowerShortestInterval(int64_t interval_micros);

  const KeyTableOptions options_;
  Clock* const clock_;
  const std::unique_ptr<MemoryStore> overflow_;
  const std::unique_ptr<Shard[]> shards_;
  const int shard_mask_;

  std::atomic<int64_t> instances_{1};
  std::atomic<int64_t> offset_micros_{0};
  std::atomic<int64_t> last_sync_micros_{0};
  std::atomic<int64_t> shortest_interval_{1'000'000};
  std::atomic<int64_t> keys_tracked_{0};
  std::atomic<int64_t> keys_synced_{0};
  std::atomic<int64_t> overflow_decisions_{0};
  std::atomic<int64_t> dropped_units_{0};
};

}  // namespace tollgate::sync

#endif  // TOLLGATE_SRC_STORE_SYNC_KEY_TABLE_H_
