// Copyright tollgate authors. What the memory store keeps beside its fixed-size entries: the
// lease sets of concurrency limits and the records of reservations, neither of which fits a
// 64-byte Record (record.h).
//
// A SideTable maps a string key to a value that stops mattering at its `expires_at_micros`,
// with the same bound and expiry rules as a shard's entries (shard.h):
//   - Bound. It never holds more than `capacity` values. A new key in a full table first
//     removes every expired value; if the table is still full, the value whose expiry is
//     soonest is evicted (evictions() counts them).
//   - Expiry. Every value has exactly one record in the expiry heap, and a value is removed
//     only when its heap record is popped (by an insertion's bounded sweep, an eviction or
//     Sweep). A record's time may be earlier than its value's (the holder moved the expiry
//     later); a popped record whose value lives longer goes back in with the value's time.
//     Find never answers an expired value, whether or not it has been removed yet.
//
// Not thread-safe: the shard that holds a table locks around every use.
#ifndef TOLLGATE_SRC_STORE_MEMORY_SIDE_TABLE_H_
#define TOLLGATE_SRC_STORE_MEMORY_SIDE_TABLE_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "src/algorithm/concurrency.h"

namespace tollgate::memory {

// The leases a concurrency limit's key holds: expired ones are dropped by every step on the
// set (src/algorithm/concurrency.h), and the whole set expires with its last lease.
struct LeaseSet {
  algorithm::ConcurrencyState state;
  int64_t expires_at_micros = 0;
};

// One reservation (Store's ItemOp::kReserve): what it took and when, kept for the limit's
// reservation_ttl whether or not it was settled, so a second settle is told it was.
struct ReservationRecord {
  int64_t reserved = 0;
  int64_t reserved_at_micros = 0;
  bool settled = false;
  int64_t expires_at_micros = 0;
};

// The side-table key of (limit name, key): unambiguous for any bytes (the name's length
// first).
inline std::string LeaseSetKey(std::string_view name, std::string_view key) {
  std::string out = absl::StrCat(name.size(), ":");
  out.append(name).append(key);
  return out;
}
// The side-table key of reservation `id` of (limit name, key): an id names a reservation of
// that limit and key only.
inline std::string ReservationKey(std::string_view name, std::string_view key,
                                  std::string_view id) {
  std::string out = absl::StrCat(id.size(), ":");
  out.append(id).append(LeaseSetKey(name, key));
  return out;
}

// REQUIRES of Value: a public `int64_t expires_at_micros`.
template <typename Value>
class SideTable {
 public:
  // The most expired values an insertion removes on its way (a full table removes them all).
  static constexpr int kSweepPerInsert = 4;

  // REQUIRES: capacity >= 1; called before any Put.
  void set_capacity(int64_t capacity) { capacity_ = capacity; }

  // `key`'s value if it has not expired at `now`, else nullptr. Valid until the next Put or
  // Sweep. The caller may change the value, its expiry included.
  Value* Find(const std::string& key, int64_t now) {
    auto it = values_.find(key);
    if (it == values_.end() || it->second.expires_at_micros <= now) return nullptr;
    return &it->second;
  }

  // Keeps `value` for `key`: in place of its value if it has one (expired or not); else as a
  // new value, unless it has already expired at `now`, after the bound above.
  void Put(std::string key, Value value, int64_t now) {
    if (auto it = values_.find(key); it != values_.end()) {
      it->second = std::move(value);  // its heap record stays, and goes back in when popped
      return;
    }
    if (value.expires_at_micros <= now) return;
    if (static_cast<int64_t>(values_.size()) >= capacity_) {
      RemoveExpired(now, -1);
      if (static_cast<int64_t>(values_.size()) >= capacity_) EvictSoonest();
    } else {
      RemoveExpired(now, kSweepPerInsert);
    }
    heap_.push_back(HeapRecord{value.expires_at_micros, key});
    std::push_heap(heap_.begin(), heap_.end(), LaterExpiry);
    values_.emplace(std::move(key), std::move(value));
  }

  // Removes every value expired at `now`. Returns how many.
  int64_t Sweep(int64_t now) { return RemoveExpired(now, -1); }

  // Values held, expired ones not yet removed included.
  int64_t size() const { return static_cast<int64_t>(values_.size()); }
  // Values evicted at the bound since the table was made.
  int64_t evictions() const { return evictions_; }

 private:
  struct HeapRecord {
    int64_t expires_at_micros;
    std::string key;
  };
  // Orders the heap (a max-heap for std::push_heap) with the earliest time on top.
  static bool LaterExpiry(const HeapRecord& a, const HeapRecord& b) {
    return a.expires_at_micros > b.expires_at_micros;
  }

  // Removes values expired at `now`, handling at most `budget` heap records (-1: no limit).
  int64_t RemoveExpired(int64_t now, int budget) {
    int64_t removed = 0;
    while (budget != 0 && !heap_.empty() && heap_.front().expires_at_micros <= now) {
      if (budget > 0) --budget;
      if (PopTop(now)) ++removed;
    }
    return removed;
  }

  // Removes the value whose own expiry is soonest. REQUIRES: the table is not empty.
  void EvictSoonest() {
    while (!heap_.empty()) {
      if (PopTop(heap_.front().expires_at_micros)) {
        ++evictions_;
        return;
      }
    }
  }

  // Pops the heap's top record: its value is removed if it expires at or before `at` (true),
  // else the record goes back in with the value's time.
  bool PopTop(int64_t at) {
    std::pop_heap(heap_.begin(), heap_.end(), LaterExpiry);
    HeapRecord& top = heap_.back();
    auto it = values_.find(top.key);
    if (it == values_.end()) {  // never: one record per value, removed only with it
      heap_.pop_back();
      return false;
    }
    if (it->second.expires_at_micros > at) {
      top.expires_at_micros = it->second.expires_at_micros;
      std::push_heap(heap_.begin(), heap_.end(), LaterExpiry);
      return false;
    }
    values_.erase(it);
    heap_.pop_back();
    return true;
  }

  int64_t capacity_ = 1;
  int64_t evictions_ = 0;
  absl::flat_hash_map<std::string, Value> values_;
  std::vector<HeapRecord> heap_;
};

}  // namespace tollgate::memory

#endif  // TOLLGATE_SRC_STORE_MEMORY_SIDE_TABLE_H_
