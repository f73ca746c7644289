// Copyright tollgate authors. One lock's share of the memory store: the entries whose hash
// falls to it, the heap that says when each expires, and its share of max_keys.
//
// What a shard guarantees to a caller that holds mu():
//   - Entries. Find(key) is key's entry or nullptr; Put keeps a state for a key, in its entry
//     or a new one.
//   - Bound. It never holds more than `capacity` entries. A new key in a full shard first
//     removes every expired entry; if the shard is still full, the entry whose own expiry is
//     soonest is evicted (evictions() counts them). A key in use has its expiry moved later by
//     every check that consumes, so it is evicted only after every idler key of its shard.
//   - Expiry. Every entry has exactly one record in the expiry heap, and an entry is removed
//     only when its heap record is popped (by a sweep or an eviction), so an entry expires at
//     the later of its own expiry and its record's time. The heap is not rewritten by every
//     check: a record's time may be earlier than its entry's (an entry's expiry moves later as
//     it is used), and a popped record whose entry lives longer goes back in with the entry's
//     time. StartDecisionsAt removes at most kSweepPerDecision expired entries, so no check
//     pays for a large sweep; Sweep removes all.
//   - Side tables. leases() and reservations() (side_table.h) hold the lease sets and the
//     reservation records of the keys whose hash falls to this shard, each bounded by the
//     shard's `capacity` on its own, and pruned only by their own operations and Sweep: a
//     plain check never touches them.
//   - Decision time. latest_micros() is the latest time a decision in this shard was made at;
//     it never moves back, so decisions in one shard carry times in the order they were made
//     even when the clock steps back or a thread is delayed between reading it and locking.
//
// Thread safety: Prefetch may be called without the lock; every other member REQUIRES mu().
#ifndef TOLLGATE_SRC_STORE_MEMORY_SHARD_H_
#define TOLLGATE_SRC_STORE_MEMORY_SHARD_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "src/store/memory/limit_rule.h"
#include "src/store/memory/line_table.h"
#include "src/store/memory/record.h"
#include "src/store/memory/side_table.h"

namespace tollgate::memory {

class alignas(64) Shard {
 public:
  // The most expired entries StartDecisionsAt removes.
  static constexpr int kSweepPerDecision = 4;

  Shard() = default;
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

  absl::Mutex& mu() const ABSL_LOCK_RETURNED(mu_) { return mu_; }

  // Sets the store's hash seed (entries' hashes are KeyHash(NameHash(seed, name), key)) and
  // the most entries this shard holds. REQUIRES: capacity >= 1; called before any Put.
  void Init(uint64_t seed, int64_t capacity) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    entries_.set_hash(RecordHash{seed});
    capacity_ = capacity;
    leases_.set_capacity(capacity);
    reservations_.set_capacity(capacity);
  }

  // Starts loading the memory a Find of a key with this hash reads first, so that the load
  // overlaps with taking the lock. Without the lock: a stale table address only loads useless
  // memory.
  void Prefetch(size_t hash) const ABSL_NO_THREAD_SAFETY_ANALYSIS { entries_.prefetch(hash); }

  // The latest time a decision in this shard was made at (0 before the first).
  int64_t latest_micros() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return latest_micros_; }

  // Decisions are now made at `now`: it becomes latest_micros(), and up to kSweepPerDecision
  // entries expired by then are removed. REQUIRES: now >= latest_micros().
  void StartDecisionsAt(int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    latest_micros_ = now;
    if (!heap_.empty() && heap_.front().expires_at_micros <= now) {
      RemoveExpired(now, kSweepPerDecision);
    }
  }

  // `key`'s entry, or nullptr. Valid until the next Put, Sweep or StartDecisionsAt. The caller
  // may set its state and expiry (what Put does for a key with an entry). REQUIRES: key.hash
  // is KeyHash(NameHash(seed, key.name), key.key).
  // Always inlined: it is on every check's path.
  ABSL_ATTRIBUTE_ALWAYS_INLINE Record* Find(const KeyView& key) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return entries_.find(key);
  }

  // Keeps `state` for `key` until `expires_at_micros`: in its entry if it has one; else in a
  // new entry, unless the state has already expired at `now` (it means what a missing entry
  // means). A new entry in a full shard evicts one first (see the bound above).
  void Put(const KeyView& key, const AnyState& state, int64_t expires_at_micros, int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Removes every entry, lease set and reservation record expired at `now`. Returns how many.
  int64_t Sweep(int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return RemoveExpired(now, -1) + leases_.Sweep(now) + reservations_.Sweep(now);
  }

  // The lease sets of concurrency limits, by LeaseSetKey(name, key).
  SideTable<LeaseSet>& leases() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return leases_; }
  // The records of reservations, by ReservationKey(name, key, id).
  SideTable<ReservationRecord>& reservations() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return reservations_;
  }

  // Live entries, including expired ones not yet removed.
  int64_t size() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return static_cast<int64_t>(entries_.size());
  }
  // Entries, lease sets and reservation records evicted at the bound since the shard was made.
  int64_t evictions() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return evictions_ + leases_.evictions() + reservations_.evictions();
  }

 private:
  // An entry's record in the expiry heap: a time at or before its expiry, and its key.
  struct HeapRecord {
    int64_t expires_at_micros;
    KeyCopy key;
  };
  // Orders the heap (a max-heap for std::push_heap) with the earliest time on top.
  static bool LaterExpiry(const HeapRecord& a, const HeapRecord& b) {
    return a.expires_at_micros > b.expires_at_micros;
  }

  // Removes entries expired at `now`, handling at most `budget` heap records (-1: no limit).
  // Returns how many entries were removed.
  int64_t RemoveExpired(int64_t now, int budget) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the entry whose own expiry is soonest. REQUIRES: the shard is not empty.
  void EvictSoonest() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pops the heap's top record; returns its entry.
  const Record& PopTop() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Puts the popped record back in with `expires_at_micros`.
  void PushBack(int64_t expires_at_micros) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the popped record and its entry.
  void DropPopped() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  int64_t latest_micros_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t capacity_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t evictions_ ABSL_GUARDED_BY(mu_) = 0;
  LineTable<Record, RecordHash, RecordEq> entries_ ABSL_GUARDED_BY(mu_);
  std::vector<HeapRecord> heap_ ABSL_GUARDED_BY(mu_);
  SideTable<LeaseSet> leases_ ABSL_GUARDED_BY(mu_);
  SideTable<ReservationRecord> reservations_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tollgate::memory

#endif  // TOLLGATE_SRC_STORE_MEMORY_SHARD_H_
