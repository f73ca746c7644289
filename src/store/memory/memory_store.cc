// Copyright tollgate authors.
//
// Layout: `shards` independent hash maps, each behind its own mutex. An entry holds one
// algorithm state and the time it stops mattering. Each shard keeps a min-heap of
// (expires_at, key) with exactly one record per entry; a record's time may be older than
// its entry's (an entry's expiry moves later as it is used, and rewriting the heap on every
// check would cost O(log n)), so a popped record whose entry lives longer is pushed again
// with the real time. A key that is used keeps one heap record and costs one re-push per
// lifetime extension at most.
//
// Bound: shard i may hold cap_i entries, where the caps add up to exactly `max_keys`
// (the shard count is lowered to at most max_keys so every cap is >= 1). A new key in a full
// shard first sweeps that shard's expired entries; if it is still full, the entry that
// would expire soonest (by its real expiry, not a stale heap time) is evicted. A key in
// active use has its expiry pushed later with every consuming check, so it is evicted only
// after every idler key of its shard.
#include "tollgate/memory_store.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "src/algorithm/fixed_window.h"
#include "src/algorithm/sliding_window.h"
#include "src/algorithm/token_bucket.h"
#include "src/core/bytes_hash.h"
#include "src/core/wall_clock.h"

namespace tollgate {
namespace {

using algorithm::FixedWindowState;
using algorithm::SlidingWindowState;
using algorithm::TokenBucketState;

// The most expired entries one check removes from its shard before doing its own work.
constexpr int kSweepPerCheck = 4;
constexpr int kMaxShards = 1 << 16;

using AnyState = std::variant<TokenBucketState, FixedWindowState, SlidingWindowState>;

struct Entry {
  AnyState state;
  int64_t expires_at_micros = 0;
};

// A stored key (limit name + '\0' + key) with its hash computed once: the shard, the map
// and the heap all use it, so a check hashes its key bytes exactly once. Keys up to
// kInlineBytes live inside the map slot itself, so finding an entry touches the slot's
// cache lines only, not a separately allocated string (the difference between two and
// three cache misses per check on a large store).
class StoredKey {
 public:
  static constexpr size_t kInlineBytes = 40;

  // Stores `name` + '\0' + `key`.
  StoredKey(std::string_view name, std::string_view key, size_t hash)
      : hash_(hash), size_(name.size() + 1 + key.size()) {
    char* data = Allocate();
    std::memcpy(data, name.data(), name.size());
    data[name.size()] = '\0';
    std::memcpy(data + name.size() + 1, key.data(), key.size());
  }
  StoredKey(const StoredKey& other) : hash_(other.hash_), size_(other.size_) {
    std::memcpy(Allocate(), other.bytes().data(), size_);
  }
  StoredKey(StoredKey&& other) noexcept : hash_(other.hash_), size_(other.size_) {
    if (size_ > kInlineBytes) {
      heap_ = other.heap_;
      other.size_ = 0;  // other keeps nothing to free
    } else {
      std::memcpy(inline_, other.inline_, size_);
    }
  }
  StoredKey& operator=(StoredKey&& other) noexcept {
    if (this != &other) {
      this->~StoredKey();
      new (this) StoredKey(std::move(other));
    }
    return *this;
  }
  StoredKey& operator=(const StoredKey& other) {
    if (this != &other) *this = StoredKey(other);
    return *this;
  }
  ~StoredKey() {
    if (size_ > kInlineBytes) delete[] heap_;
  }

  std::string_view bytes() const { return {size_ > kInlineBytes ? heap_ : inline_, size_}; }
  size_t hash() const { return hash_; }

 private:
  char* Allocate() { return size_ > kInlineBytes ? (heap_ = new char[size_]) : inline_; }

  size_t hash_;
  size_t size_;
  union {
    char inline_[kInlineBytes];
    char* heap_;
  };
};

// A key being looked up: a limit name and a key owned by the caller, and their HashKey().
struct KeyView {
  std::string_view name;
  std::string_view key;
  size_t hash = 0;

  bool operator==(const KeyView& other) const {
    return hash == other.hash && name == other.name && key == other.key;
  }
};

// The hash of a stored key, from its two parts: no composed copy is needed to look it up.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline size_t HashKey(uint64_t seed, std::string_view name,
                                                   std::string_view key) {
  return internal::HashBytes(internal::HashBytes(seed, name), key);
}

struct KeyHash {
  using is_transparent = void;
  size_t operator()(const StoredKey& key) const { return key.hash(); }
  size_t operator()(const KeyView& key) const { return key.hash; }
};

struct KeyEq {
  using is_transparent = void;
  bool operator()(const StoredKey& a, const StoredKey& b) const {
    const std::string_view x = a.bytes();
    const std::string_view y = b.bytes();
    return a.hash() == b.hash() && x.size() == y.size() &&
           internal::BytesEqual(x.data(), y.data(), x.size());
  }
  // Inline: every lookup runs it once (and out of line it costs a call and register moves
  // as much as the comparison itself).
  ABSL_ATTRIBUTE_ALWAYS_INLINE bool operator()(const StoredKey& a, const KeyView& b) const {
    const std::string_view bytes = a.bytes();
    const size_t name_size = b.name.size();
    return a.hash() == b.hash && bytes.size() == name_size + 1 + b.key.size() &&
           internal::BytesEqual(bytes.data(), b.name.data(), name_size) &&
           bytes[name_size] == '\0' &&
           internal::BytesEqual(bytes.data() + name_size + 1, b.key.data(), b.key.size());
  }
  bool operator()(const KeyView& a, const StoredKey& b) const { return (*this)(b, a); }
};

struct HeapRecord {
  int64_t expires_at_micros;
  StoredKey key;
};

// std::push_heap builds a max-heap; this order puts the soonest expiry on top.
struct LaterExpiry {
  bool operator()(const HeapRecord& a, const HeapRecord& b) const {
    return a.expires_at_micros > b.expires_at_micros;
  }
};

// Allocates the hash maps' arrays (megabytes each in a large store) on transparent huge
// pages, which the kernel gives only on request in its default "madvise" mode: with 4 KiB
// pages a lookup in a large store misses the TLB on nearly every check, and the page walk
// is one more cache miss. Small arrays come from the ordinary allocator.
template <typename T>
struct HugePageAllocator {
  using value_type = T;
  static constexpr size_t kHugePage = size_t{2} << 20;

  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>& /*other*/) {}  // NOLINT: rebinding is implicit

  static size_t Bytes(size_t n) { return n * sizeof(T); }
  static size_t Rounded(size_t bytes) { return (bytes + kHugePage - 1) / kHugePage * kHugePage; }

  T* allocate(size_t n) {
    if (Bytes(n) < kHugePage) return std::allocator<T>().allocate(n);
    void* memory = std::aligned_alloc(kHugePage, Rounded(Bytes(n)));
    if (memory == nullptr) throw std::bad_alloc();      // as std::allocator does
    madvise(memory, Rounded(Bytes(n)), MADV_HUGEPAGE);  // a hint: without it, 4 KiB pages
    return static_cast<T*>(memory);
  }
  void deallocate(T* memory, size_t n) {
    if (Bytes(n) < kHugePage) {
      std::allocator<T>().deallocate(memory, n);
    } else {
      std::free(memory);
    }
  }
  template <typename U>
  bool operator==(const HugePageAllocator<U>& /*other*/) const {
    return true;
  }
};

using EntryMap = absl::flat_hash_map<StoredKey, Entry, KeyHash, KeyEq,
                                     HugePageAllocator<std::pair<const StoredKey, Entry>>>;

// Cache-line aligned so two shards' mutexes never share a line.
struct alignas(64) Shard {
  absl::Mutex mu;
  EntryMap entries ABSL_GUARDED_BY(mu);
  std::vector<HeapRecord> heap ABSL_GUARDED_BY(mu);
  int64_t capacity = 1;  // set once before the store is shared
  // The token bucket durations of the numbers this shard's last token bucket check used:
  // computing them costs two divisions on the critical path of every check, and a shard's
  // checks nearly always use the same limit. 0 capacity: none yet.
  int64_t times_capacity ABSL_GUARDED_BY(mu) = 0;
  double times_refill_per_second ABSL_GUARDED_BY(mu) = 0;
  algorithm::TokenBucketTimes times ABSL_GUARDED_BY(mu);
};

// `params`' durations, from the shard's cache when it holds them.
const algorithm::TokenBucketTimes& TimesFor(Shard& shard,
                                            const algorithm::TokenBucketParams& params)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  if (ABSL_PREDICT_FALSE(params.capacity != shard.times_capacity ||
                         params.refill_per_second != shard.times_refill_per_second)) {
    shard.times = algorithm::TokenBucketTimesFor(params);
    shard.times_capacity = params.capacity;
    shard.times_refill_per_second = params.refill_per_second;
  }
  return shard.times;
}

// One step's result, whichever the algorithm.
struct Step {
  Decision decision;
  AnyState state;
  bool changed = false;
  int64_t expires_at_micros = 0;
};

template <typename S>
std::optional<S> StateAs(const AnyState* state) {
  // A state of another algorithm (the limit was redefined) counts as none.
  if (state == nullptr || !std::holds_alternative<S>(*state)) return std::nullopt;
  return std::get<S>(*state);
}

template <typename S>
Step FromOutcome(algorithm::Outcome<S>&& outcome) {
  Step step;
  step.decision = outcome.decision;
  step.decision.source = DecisionSource::kMemory;
  step.state = outcome.state;
  step.changed = outcome.changed;
  step.expires_at_micros = outcome.expires_at_micros;
  return step;
}

Step Compute(const LimitNumbers& numbers, const AnyState* state, int64_t now_micros, int64_t cost) {
  switch (numbers.algorithm) {
    case Algorithm::kTokenBucket:
      return FromOutcome(algorithm::TokenBucketCheck(
          StateAs<TokenBucketState>(state), now_micros,
          algorithm::TokenBucketParams{numbers.capacity, numbers.refill_per_second}, cost));
    case Algorithm::kFixedWindow:
      return FromOutcome(algorithm::FixedWindowCheck(
          StateAs<FixedWindowState>(state), now_micros,
          algorithm::WindowParams{numbers.limit, numbers.window_micros}, cost));
    case Algorithm::kSlidingWindow:
      return FromOutcome(algorithm::SlidingWindowCheck(
          StateAs<SlidingWindowState>(state), now_micros,
          algorithm::WindowParams{numbers.limit, numbers.window_micros}, cost));
  }
  return Step{};  // unreachable: Validate() rejects unknown algorithms
}

// The algorithms' preconditions; a violation would be undefined behaviour (division by zero,
// infinities cast to integers), so it is an error here, not a crash.
// Inline: CheckOne runs it on every check.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline bool NumbersValid(const LimitNumbers& n) {
  switch (n.algorithm) {
    case Algorithm::kTokenBucket:
      return n.capacity >= 1 && n.refill_per_second > 0 && n.refill_per_second < 1e300;
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingWindow:
      return n.limit >= 1 && n.window_micros >= 1;
  }
  return false;
}

absl::Status Validate(const Limit* limit, std::string_view key, int64_t cost) {
  if (limit == nullptr) return absl::InvalidArgumentError("check item without a limit");
  if (key.empty()) return absl::InvalidArgumentError("empty key");
  if (cost < 0) return absl::InvalidArgumentError("negative cost");
  if (NumbersValid(limit->numbers)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("limit \"", limit->name, "\" has invalid numbers"));
}

class MemoryStoreImpl final : public MemoryStore {
 public:
  MemoryStoreImpl(Clock* clock, int shards, int64_t max_keys)
      : clock_(clock),
        wall_clock_(dynamic_cast<const internal::WallClock*>(clock)),
        shards_(std::make_unique<Shard[]>(shards)),
        shard_mask_(shards - 1) {
    for (int i = 0; i < shards; ++i) {
      shards_[i].capacity = max_keys / shards + (i < max_keys % shards ? 1 : 0);
    }
  }

  void CheckAsync(std::vector<CheckItem> items, CheckCallback done) override {
    for (const CheckItem& item : items) {
      if (absl::Status status = Validate(item.limit, item.key, item.cost); !status.ok()) {
        std::move(done)(std::move(status));
        return;
      }
    }
    if (items.empty()) {
      std::move(done)(absl::InvalidArgumentError("no check items"));
      return;
    }
    std::vector<Decision> decisions(items.size());
    if (items.size() == 1) {
      CheckSingle(*items[0].limit, items[0].key, items[0].cost, decisions[0]);
    } else {
      // One clock read per batch: every item is decided at the same instant.
      CheckMany(items, clock_->NowMicros(), decisions);
    }
    std::move(done)(std::move(decisions));
  }

  absl::StatusOr<Decision> CheckOne(const Limit& limit, std::string_view key,
                                    int64_t cost) override {
    // The decision is written straight into the returned object (one named result, so it is
    // not copied): a copy would load whole 16 bytes of fields just stored one by one, and
    // each such load waits until the stores retire, a large share of a hot-key check.
    absl::StatusOr<Decision> result(absl::in_place);
    if (ABSL_PREDICT_FALSE(key.empty() || cost < 0 || !NumbersValid(limit.numbers))) {
      result = Validate(&limit, key, cost);
    } else {
      CheckSingle(limit, key, cost, *result);
    }
    return result;
  }

  std::string_view Name() const override { return "memory"; }

  int64_t Size() const override {
    int64_t size = 0;
    for (int i = 0; i <= shard_mask_; ++i) {
      absl::MutexLock lock(&shards_[i].mu);
      size += static_cast<int64_t>(shards_[i].entries.size());
    }
    return size;
  }

  int64_t Sweep() override {
    const int64_t now = clock_->NowMicros();
    int64_t removed = 0;
    for (int i = 0; i <= shard_mask_; ++i) {
      absl::MutexLock lock(&shards_[i].mu);
      removed += SweepExpired(shards_[i], now, -1);
    }
    return removed;
  }

  int64_t Evictions() const override { return evictions_.load(std::memory_order_relaxed); }

 private:
  Shard& ShardFor(size_t hash) const {
    // The map uses the hash's low bits (slot and control byte); the shard takes high bits so
    // the keys within one shard still spread over the whole hash.
    return shards_[static_cast<int>((hash >> 48) & static_cast<size_t>(shard_mask_))];
  }

  // The fast path: one item, one shard, no temporaries (the key is hashed and compared in
  // its two parts, never composed unless it is new), and the algorithm's state read and
  // written in place.
  //
  // The clock is read under the shard lock, after the key's slot has been prefetched: on a
  // large store finding the slot costs two cache misses, which then overlap with each other
  // and with the clock read instead of following one another. And decisions on a key then
  // carry times in the order they were made, so a thread delayed between reading the clock
  // and taking the lock cannot decide with a time older than a decision already made.
  void CheckSingle(const Limit& limit, std::string_view key_bytes, int64_t cost, Decision& out) {
    const KeyView key{limit.name, key_bytes, HashKey(seed_, limit.name, key_bytes)};
    Shard& shard = ShardFor(key.hash);
    absl::MutexLock lock(&shard.mu);
    shard.entries.prefetch(key);
    const int64_t now = Now();
    if (HasExpired(shard, now)) SweepExpired(shard, now, kSweepPerCheck);
    auto it = shard.entries.find(key);
    Entry* entry = it == shard.entries.end() ? nullptr : &it->second;
    const LimitNumbers& n = limit.numbers;
    switch (n.algorithm) {
      case Algorithm::kTokenBucket: {
        const algorithm::TokenBucketParams params{n.capacity, n.refill_per_second};
        const algorithm::TokenBucketTimes& times = TimesFor(shard, params);
        return Apply<TokenBucketState>(shard, key, entry, now, out, [&](const auto& state) {
          return algorithm::TokenBucketCheck(state, now, params, times, cost);
        });
      }
      case Algorithm::kFixedWindow:
        return Apply<FixedWindowState>(shard, key, entry, now, out, [&](const auto& state) {
          return algorithm::FixedWindowCheck(
              state, now, algorithm::WindowParams{n.limit, n.window_micros}, cost);
        });
      case Algorithm::kSlidingWindow:
        return Apply<SlidingWindowState>(shard, key, entry, now, out, [&](const auto& state) {
          return algorithm::SlidingWindowCheck(
              state, now, algorithm::WindowParams{n.limit, n.window_micros}, cost);
        });
    }
    out = Decision{};  // unreachable: Validate() rejects unknown algorithms
  }

  template <typename S, typename AlgorithmStep>
  void Apply(Shard& shard, const KeyView& key, Entry* entry, int64_t now, Decision& out,
             AlgorithmStep step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    S* stored = entry != nullptr ? std::get_if<S>(&entry->state) : nullptr;
    algorithm::Outcome<S> outcome =
        step(stored != nullptr ? std::optional<S>(*stored) : std::optional<S>());
    if (outcome.decision.allowed && outcome.changed) {
      if (stored != nullptr) {
        // Its heap record stays; it is pushed again with this time when it comes up.
        *stored = outcome.state;
        entry->expires_at_micros = outcome.expires_at_micros;
      } else {
        Commit(shard, key, entry, AnyState(outcome.state), outcome.expires_at_micros, now);
      }
    }
    // Field by field, for the same reason as in CheckOne (a struct copy loads 16 bytes of
    // fields just stored one by one).
    const Decision& decision = outcome.decision;
    out.allowed = decision.allowed;
    out.limit = decision.limit;
    out.remaining = decision.remaining;
    out.reset_after_micros = decision.reset_after_micros;
    out.retry_after_micros = decision.retry_after_micros;
    out.source = DecisionSource::kMemory;
    out.reason = decision.reason;
  }

  // All or nothing over several items, possibly in several shards and possibly naming the
  // same (limit, key) more than once.
  void CheckMany(const std::vector<CheckItem>& items, int64_t now,
                 std::vector<Decision>& decisions) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    struct Pending {
      KeyView key;
      Shard* shard = nullptr;
      Step step;
    };
    absl::InlinedVector<Pending, 4> pending(items.size());
    absl::InlinedVector<Shard*, 4> locked;
    for (size_t i = 0; i < items.size(); ++i) {
      const std::string& name = items[i].limit->name;
      pending[i].key = KeyView{name, items[i].key, HashKey(seed_, name, items[i].key)};
      pending[i].shard = &ShardFor(pending[i].key.hash);
      locked.push_back(pending[i].shard);
    }
    // Ascending address order = ascending shard order: every caller locks in the same order,
    // so two batches sharing shards cannot deadlock.
    std::sort(locked.begin(), locked.end());
    locked.erase(std::unique(locked.begin(), locked.end()), locked.end());
    for (Shard* shard : locked) {
      shard->mu.Lock();
      if (HasExpired(*shard, now)) SweepExpired(*shard, now, kSweepPerCheck);
    }

    bool all_allowed = true;
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
      if (state == nullptr) {
        auto it = p.shard->entries.find(p.key);
        if (it != p.shard->entries.end()) state = &it->second.state;
      }
      p.step = Compute(items[i].limit->numbers, state, now, items[i].cost);
      all_allowed = all_allowed && p.step.decision.allowed;
      decisions[i] = p.step.decision;
    }

    if (all_allowed) {
      for (Pending& p : pending) {
        if (!p.step.changed) continue;
        // Looked up again: an earlier commit may have inserted into (and rehashed) the map.
        auto it = p.shard->entries.find(p.key);
        Entry* entry = it == p.shard->entries.end() ? nullptr : &it->second;
        Commit(*p.shard, p.key, entry, p.step.state, p.step.expires_at_micros, now);
      }
    }
    for (auto it = locked.rbegin(); it != locked.rend(); ++it) (*it)->mu.Unlock();
  }

  // Stores a consumed state. `entry` is the key's current entry or nullptr.
  void Commit(Shard& shard, const KeyView& key, Entry* entry, AnyState state,
              int64_t expires_at_micros, int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    if (entry != nullptr) {
      // Its heap record stays; it is pushed again with this time when it comes up.
      entry->state = state;
      entry->expires_at_micros = expires_at_micros;
      return;
    }
    // A state that already means "missing" (a full bucket) is not worth an entry.
    if (expires_at_micros <= now) return;
    if (static_cast<int64_t>(shard.entries.size()) >= shard.capacity) {
      SweepExpired(shard, now, -1);
      if (static_cast<int64_t>(shard.entries.size()) >= shard.capacity) EvictSoonest(shard);
    }
    StoredKey stored(key.name, key.key, key.hash);
    shard.heap.push_back(HeapRecord{expires_at_micros, stored});
    std::push_heap(shard.heap.begin(), shard.heap.end(), LaterExpiry());
    shard.entries.emplace(std::move(stored), Entry{state, expires_at_micros});
  }

  // Pops the top heap record. Returns its entry's real expiry and leaves the record popped
  // (at heap.back()) for the caller to drop or push again.
  static std::pair<HeapRecord*, Entry*> PopTop(Shard& shard)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    std::pop_heap(shard.heap.begin(), shard.heap.end(), LaterExpiry());
    HeapRecord& record = shard.heap.back();
    auto it = shard.entries.find(record.key);
    return {&record, it == shard.entries.end() ? nullptr : &it->second};
  }

  // Puts the popped record back with its entry's real expiry.
  static void Repush(Shard& shard, int64_t expires_at_micros)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    shard.heap.back().expires_at_micros = expires_at_micros;
    std::push_heap(shard.heap.begin(), shard.heap.end(), LaterExpiry());
  }

  static void DropTop(Shard& shard) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    HeapRecord& record = shard.heap.back();
    shard.entries.erase(record.key);
    shard.heap.pop_back();
  }

  // Whether the shard's soonest heap record is due (checked inline before each check).
  static bool HasExpired(const Shard& shard, int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    return !shard.heap.empty() && shard.heap.front().expires_at_micros <= now;
  }

  // Removes entries expired at `now`, at most `budget` heap records handled (-1: no limit).
  // Returns how many entries were removed.
  static int64_t SweepExpired(Shard& shard, int64_t now, int budget)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    int64_t removed = 0;
    while (budget != 0 && !shard.heap.empty() && shard.heap.front().expires_at_micros <= now) {
      if (budget > 0) --budget;
      auto [record, entry] = PopTop(shard);
      if (entry != nullptr && entry->expires_at_micros > now) {
        Repush(shard, entry->expires_at_micros);
        continue;
      }
      DropTop(shard);
      if (entry != nullptr) ++removed;
    }
    return removed;
  }

  // Removes the entry whose real expiry is soonest. REQUIRES: the shard is not empty.
  void EvictSoonest(Shard& shard) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    while (!shard.heap.empty()) {
      auto [record, entry] = PopTop(shard);
      if (entry != nullptr && entry->expires_at_micros > record->expires_at_micros) {
        Repush(shard, entry->expires_at_micros);  // used since; not as soon as it says
        continue;
      }
      DropTop(shard);
      if (entry == nullptr) continue;  // a record without an entry frees nothing
      evictions_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }

  // The time for a check: the system clock's read inlined (no virtual call), or any other.
  int64_t Now() const {
    return wall_clock_ != nullptr ? wall_clock_->NowMicrosInline() : clock_->NowMicros();
  }

  Clock* const clock_;
  // `clock_` when it is the system clock (a WallClock), else nullptr.
  const internal::WallClock* const wall_clock_;
  // Seeds HashKey(): differs between stores and processes (address space randomization).
  const uint64_t seed_ = absl::HashOf(reinterpret_cast<uintptr_t>(this));
  const std::unique_ptr<Shard[]> shards_;
  const int shard_mask_;
  std::atomic<int64_t> evictions_{0};
};

}  // namespace

absl::StatusOr<std::unique_ptr<MemoryStore>> MemoryStore::Create(MemoryStoreOptions options) {
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
  return std::unique_ptr<MemoryStore>(new MemoryStoreImpl(clock, shards, options.max_keys));
}

}  // namespace tollgate
