// Copyright tollgate authors.
//
// Layout: a table of (limit, key) entries in `shards` hash maps, each behind its own mutex
// (as in MemoryStore). An entry holds, for its current window w and the previous one w-1:
//   view      the global total last read from Redis,
//   unsent    units admitted here and not yet put in a sync batch,
//   unacked   units in sync batches whose reply has not come back OK yet.
// The request path reads and writes only the entry, under its shard's lock. The sync thread
// locks one shard at a time to move `unsent` into a batch, then sends the batch (and any
// earlier unacknowledged ones) in one EVALSHA, and on the reply locks each entry's shard
// again to replace its view and release its `unacked`.
#include "tollgate/sync_store.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "src/algorithm/fixed_window.h"
#include "src/algorithm/sliding_window.h"
#include "src/core/batch.h"
#include "src/store/redis/client.h"
#include "src/store/redis/redis_url.h"
#include "src/store/sync/sync_script.h"
#include "tollgate/memory_store.h"

namespace tollgate {
namespace {

using redis::RedisReply;

constexpr int64_t kMinSyncIntervalMicros = 10'000;
// A key with no check and no delta for this many of its intervals is cold: not synced.
constexpr int64_t kColdIntervals = 2;
// A fail_closed limit refuses once the last successful sync is older than this many of its
// intervals.
constexpr int64_t kFailClosedIntervals = 2;
// The sequence-number key outlives any window a pending batch can still belong to.
constexpr int64_t kSequenceTtlMs = 24 * 3600 * 1000;
// Unacknowledged batches kept while Redis is unreachable; beyond, the oldest is dropped.
constexpr size_t kMaxPendingBatches = 256;
constexpr int kMaxShards = 1 << 16;

// What an entry needs of its limit, copied once: the sync thread outlives any one call's
// Limit pointer.
struct KeyInfo {
  std::string limit_name;
  LimitNumbers numbers;
  int64_t sync_interval_micros = 0;
  std::string redis_base;  // <prefix><limit name>:{<key>}
};

struct Entry {
  std::shared_ptr<const KeyInfo> info;
  int64_t window_index = 0;
  int64_t view_current = 0;
  int64_t view_previous = 0;
  int64_t unsent_current = 0;
  int64_t unsent_previous = 0;
  int64_t unacked_current = 0;
  int64_t unacked_previous = 0;
  // Units this instance may admit in the current window beyond its synced ones, as granted
  // by the last successful sync of the window; -1 before one: then floor(left / N). For a
  // sliding window, what was left of the previous window's grant until the first sync of
  // this one (`grant_carried`; see sync_script.h).
  int64_t grant_current = -1;
  bool grant_carried = false;
  int64_t last_check_micros = 0;  // the store's clock, without the Redis offset
  int64_t next_sync_micros = 0;   // likewise

  int64_t LocalCurrent() const { return unsent_current + unacked_current; }
  int64_t LocalPrevious() const { return unsent_previous + unacked_previous; }
  bool HasDeltas() const {
    return unsent_current + unsent_previous + unacked_current + unacked_previous > 0;
  }
  // When the entry stops mattering (a missing entry then means the same thing).
  int64_t ExpiresAtMicros() const {
    const int64_t window = info->numbers.window_micros;
    return info->numbers.algorithm == Algorithm::kSlidingWindow ? (window_index + 2) * window
                                                                : (window_index + 1) * window;
  }
};

// A table key with its hash computed once: the hash picks the shard and is then reused by
// the shard's map (lookups with a KeyView do not hash again).
struct KeyView {
  absl::string_view bytes;
  size_t hash;
};

struct KeyHash {
  using is_transparent = void;
  size_t operator()(absl::string_view key) const { return absl::HashOf(key); }
  size_t operator()(const KeyView& key) const { return key.hash; }
};

struct KeyEq {
  using is_transparent = void;
  bool operator()(absl::string_view a, absl::string_view b) const { return a == b; }
  bool operator()(const KeyView& a, absl::string_view b) const { return a.bytes == b; }
  bool operator()(absl::string_view a, const KeyView& b) const { return a == b.bytes; }
};

// A shard's lock: a plain futex-based mutex (std::mutex), not absl::Mutex. Debian's Abseil
// is built without NDEBUG, so unless the process turns deadlock detection off, every
// absl::Mutex::Lock also updates a process-wide graph under a global lock; the store does
// not depend on what the embedding program does (docs/sync.md has the cost).
class ABSL_LOCKABLE ShardMutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

class ABSL_SCOPED_LOCKABLE ShardLock {
 public:
  explicit ShardLock(ShardMutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ShardLock(const ShardLock&) = delete;
  ShardLock& operator=(const ShardLock&) = delete;
  ~ShardLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }

 private:
  ShardMutex* const mu_;
};

struct alignas(64) Shard {
  ShardMutex mu;
  absl::flat_hash_map<std::string, Entry, KeyHash, KeyEq> entries ABSL_GUARDED_BY(mu);
};

// One counter of one sync batch.
struct BatchItem {
  std::string map_key;  // the entry's key in the table
  std::string redis_key;
  int64_t window_index = 0;
  int64_t window_micros = 0;
  int64_t delta = 0;
  int64_t ttl_ms = 0;
  // For a grant (see sync_script.h): the limit, or 0 for no grant (a previous window).
  int64_t limit = 0;
  // For a sliding window's current counter, its window; the item before is the previous one.
  int64_t sliding_window_micros = 0;
};

struct Batch {
  int64_t sequence = 0;
  std::vector<BatchItem> items;
};

absl::Status ValidateItem(const CheckItem& item) {
  if (item.limit == nullptr) return absl::InvalidArgumentError("check item without a limit");
  if (item.key.empty()) return absl::InvalidArgumentError("empty key");
  if (item.cost < 0) return absl::InvalidArgumentError("negative cost");
  const Limit& limit = *item.limit;
  const LimitNumbers& n = limit.numbers;
  if (n.algorithm == Algorithm::kTokenBucket) {
    return absl::InvalidArgumentError(
        absl::StrCat("limit \"", limit.name,
                     "\": sync mode counts requests per window and supports fixed_window and "
                     "sliding_window only, not token_bucket"));
  }
  if (n.limit < 1 || n.window_micros < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("limit \"", limit.name, "\" has invalid numbers"));
  }
  if (limit.sync_interval_micros < kMinSyncIntervalMicros) {
    return absl::InvalidArgumentError(absl::StrCat("limit \"", limit.name,
                                                   "\": sync_interval must be at least 10ms, got ",
                                                   limit.sync_interval_micros, "us"));
  }
  return absl::OkStatus();
}

// Limit name + '\0' + key.
void ComposeKey(const CheckItem& item, std::string& out) {
  const std::string& name = item.limit->name;
  out.resize(name.size() + 1 + item.key.size());
  char* p = out.data();
  std::memcpy(p, name.data(), name.size());
  p[name.size()] = '\0';
  std::memcpy(p + name.size() + 1, item.key.data(), item.key.size());
}

int64_t CeilMillis(int64_t micros) { return micros <= 0 ? 1 : (micros + 999) / 1000; }

std::string RandomInstanceId() {
  std::random_device random;
  std::mt19937_64 generator((static_cast<uint64_t>(random()) << 32) ^ random());
  return absl::StrCat(absl::Hex(generator(), absl::kZeroPad16));
}

class SyncStoreImpl final : public SyncStore {
 public:
  SyncStoreImpl(SyncStoreOptions options, std::unique_ptr<redis::RedisClient> client,
                std::string script_sha, std::unique_ptr<MemoryStore> overflow, int shards)
      : options_(std::move(options)),
        clock_(options_.clock != nullptr ? options_.clock : &SystemClock()),
        client_(std::move(client)),
        script_sha_(std::move(script_sha)),
        instance_id_(RandomInstanceId()),
        sequence_key_(absl::StrCat(options_.key_prefix, "sync:", instance_id_)),
        overflow_(std::move(overflow)),
        shards_(std::make_unique<Shard[]>(shards)),
        shard_mask_(shards - 1) {
    RefreshInstanceCount();
    last_success_micros_.store(clock_->NowMicros(), std::memory_order_relaxed);
  }

  ~SyncStoreImpl() override {
    {
      absl::MutexLock lock(&thread_mu_);
      stopping_ = true;
    }
    if (thread_.joinable()) thread_.join();
    // Hand the last deltas to Redis, so the other instances' counts include them.
    (void)SyncNow();
  }

  void StartThread() {
    thread_ = std::thread([this] { Loop(); });
  }

  absl::Status LearnClockOffset() {
    const int64_t before = clock_->NowMicros();
    absl::StatusOr<RedisReply> reply = client_->Command({"TIME"});
    const int64_t after = clock_->NowMicros();
    if (!reply.ok()) return reply.status();
    int64_t seconds = 0, micros = 0;
    if (reply->type != RedisReply::Type::kArray || reply->elements.size() != 2 ||
        !absl::SimpleAtoi(reply->elements[0].str, &seconds) ||
        !absl::SimpleAtoi(reply->elements[1].str, &micros)) {
      return absl::InternalError(absl::StrCat("unexpected TIME reply: ", DebugString(*reply)));
    }
    SetOffset(seconds * 1'000'000 + micros, before, after);
    return absl::OkStatus();
  }

  void CheckAsync(std::vector<CheckItem> items, CheckCallback done) override {
    if (items.empty()) {
      std::move(done)(absl::InvalidArgumentError("no check items"));
      return;
    }
    for (const CheckItem& item : items) {
      if (absl::Status status = ValidateItem(item); !status.ok()) {
        std::move(done)(std::move(status));
        return;
      }
    }
    if (items.size() == 1) {
      if (std::optional<Decision> decision = DecideTracked(items[0])) {
        std::move(done)(std::vector<Decision>{*decision});
        return;
      }
    }
    std::move(done)(Decide(items));
  }

  absl::Status SyncNow() override {
    absl::MutexLock lock(&sync_mu_);
    return Round(/*force=*/true);
  }

  SyncStoreStats stats() const override {
    SyncStoreStats stats;
    stats.syncs = syncs_.load(std::memory_order_relaxed);
    stats.sync_failures = sync_failures_.load(std::memory_order_relaxed);
    stats.redis_commands = redis_commands_.load(std::memory_order_relaxed);
    stats.keys_tracked = keys_tracked_.load(std::memory_order_relaxed);
    stats.keys_synced = keys_synced_.load(std::memory_order_relaxed);
    stats.overflow_decisions = overflow_decisions_.load(std::memory_order_relaxed);
    stats.dropped_units = dropped_units_.load(std::memory_order_relaxed);
    stats.clock_offset_micros = offset_micros_.load(std::memory_order_relaxed);
    return stats;
  }

 private:
  // ---- Request path ------------------------------------------------------------------

  Shard& ShardFor(size_t hash) const {
    return shards_[static_cast<int>((hash >> 48) & static_cast<size_t>(shard_mask_))];
  }

  int64_t Now(int64_t clock_now) const {
    return clock_now + offset_micros_.load(std::memory_order_relaxed);
  }

  // The fast path: one item whose key is tracked already, one lock, one hash, no allocation
  // (for keys up to 255 bytes). nullopt when the key is new (Decide() creates it).
  std::optional<Decision> DecideTracked(const CheckItem& item) {
    // Limit name + '\0' + key, on the stack when it fits.
    const std::string& name = item.limit->name;
    const size_t size = name.size() + 1 + item.key.size();
    char stack[256];
    std::string heap;
    char* bytes = stack;
    if (size > sizeof(stack)) {
      heap.resize(size);
      bytes = heap.data();
    }
    std::memcpy(bytes, name.data(), name.size());
    bytes[name.size()] = '\0';
    std::memcpy(bytes + name.size() + 1, item.key.data(), item.key.size());
    const absl::string_view view(bytes, size);
    const KeyView key{view, absl::HashOf(view)};
    Shard& shard = ShardFor(key.hash);
    const int64_t clock_now = clock_->NowMicros();
    ShardLock lock(&shard.mu);
    auto it = shard.entries.find(key);
    if (it == shard.entries.end() || !SameLimit(*it->second.info, *item.limit)) {
      return std::nullopt;
    }
    return DecideOne(it->second, item, clock_now, Now(clock_now),
                     instance_count_.load(std::memory_order_relaxed));
  }

  absl::StatusOr<std::vector<Decision>> Decide(const std::vector<CheckItem>& items)
      ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const int64_t clock_now = clock_->NowMicros();
    const int64_t now = Now(clock_now);
    const int64_t instances = instance_count_.load(std::memory_order_relaxed);
    std::vector<Decision> decisions(items.size());

    struct Pending {
      std::string bytes;
      size_t hash = 0;
      Shard* shard = nullptr;
      Entry* entry = nullptr;  // nullptr: beyond max_keys, decided by `overflow_`
    };
    absl::InlinedVector<Pending, 2> pending(items.size());
    absl::InlinedVector<Shard*, 2> locked;
    for (size_t i = 0; i < items.size(); ++i) {
      ComposeKey(items[i], pending[i].bytes);
      pending[i].hash = absl::HashOf(absl::string_view(pending[i].bytes));
      pending[i].shard = &ShardFor(pending[i].hash);
      locked.push_back(pending[i].shard);
    }
    // Every caller locks shards in address order, so two calls cannot deadlock.
    std::sort(locked.begin(), locked.end());
    locked.erase(std::unique(locked.begin(), locked.end()), locked.end());
    for (Shard* shard : locked) shard->mu.Lock();

    // Find or create every entry first; pointers are taken after the last insertion, since
    // an insertion may rehash the map.
    bool any_overflow = false;
    for (size_t i = 0; i < items.size(); ++i) {
      Pending& p = pending[i];
      auto it = p.shard->entries.find(absl::string_view(p.bytes));
      if (it == p.shard->entries.end()) {
        if (keys_tracked_.load(std::memory_order_relaxed) >= options_.max_keys) {
          any_overflow = true;
          continue;
        }
        keys_tracked_.fetch_add(1, std::memory_order_relaxed);
        Entry entry;
        entry.info = MakeInfo(items[i]);
        entry.window_index = algorithm::WindowIndex(now, entry.info->numbers.window_micros);
        entry.next_sync_micros = clock_now + entry.info->sync_interval_micros;
        LowerTick(entry.info->sync_interval_micros);
        p.shard->entries.emplace(p.bytes, std::move(entry));
      } else if (!SameLimit(*it->second.info, *items[i].limit)) {
        // The limit was redefined: start over with its new numbers.
        Entry& entry = it->second;
        entry = Entry{.info = MakeInfo(items[i])};
        entry.window_index = algorithm::WindowIndex(now, entry.info->numbers.window_micros);
        entry.next_sync_micros = clock_now + entry.info->sync_interval_micros;
        LowerTick(entry.info->sync_interval_micros);
      }
    }
    for (Pending& p : pending) {
      auto it = p.shard->entries.find(absl::string_view(p.bytes));
      p.entry = it == p.shard->entries.end() ? nullptr : &it->second;
    }

    // Decide each item and consume at once (a later item of the same key sees it); undo
    // every consumption if any item is refused.
    bool all_allowed = true;
    for (size_t i = 0; i < items.size(); ++i) {
      if (pending[i].entry == nullptr) continue;
      decisions[i] = DecideOne(*pending[i].entry, items[i], clock_now, now, instances);
      all_allowed = all_allowed && (decisions[i].allowed || items[i].shadow);
    }
    if (any_overflow) {
      // After a refusal the overflow items are only peeked at, so nothing is consumed.
      all_allowed = DecideOverflow(items, pending, instances, /*peek=*/!all_allowed, decisions) &&
                    all_allowed;
    }
    if (!all_allowed) {
      for (size_t i = 0; i < items.size(); ++i) {
        if (pending[i].entry != nullptr && decisions[i].allowed) {
          pending[i].entry->unsent_current -= items[i].cost;
        }
      }
      internal::GiveBackUncharged(items, absl::MakeSpan(decisions));
    }
    for (auto it = locked.rbegin(); it != locked.rend(); ++it) (*it)->mu.Unlock();
    return decisions;
  }

  // Decides one item from its entry and, when allowed, consumes its cost.
  Decision DecideOne(Entry& entry, const CheckItem& item, int64_t clock_now, int64_t now,
                     int64_t instances) {
    entry.last_check_micros = clock_now;
    const KeyInfo& info = *entry.info;
    const int64_t window = info.numbers.window_micros;
    const int64_t limit = info.numbers.limit;
    // Still in the entry's window (the common case) costs a multiplication, not a division.
    if (now >= (entry.window_index + 1) * window) Roll(entry, algorithm::WindowIndex(now, window));
    // Time going backwards (or a smaller Redis offset) counts as no time passing.
    now = std::max(now, entry.window_index * window);
    const int64_t window_end = (entry.window_index + 1) * window;

    if (item.limit->on_store_failure == FailureMode::kFailClosed &&
        clock_now - last_success_micros_.load(std::memory_order_relaxed) >
            kFailClosedIntervals * info.sync_interval_micros) {
      Decision d;
      d.limit = limit;
      d.source = DecisionSource::kSync;
      d.reason = DenyReason::kStoreUnavailable;
      d.reset_after_micros = window_end - now;
      d.retry_after_micros = info.sync_interval_micros;
      return d;
    }

    // What everybody is known to have used: the view plus this instance's own deltas. The
    // exact algorithm on that state gives the global refusal and the reset/retry times.
    const algorithm::WindowParams params{limit, window};
    Decision d;
    int64_t left;  // of the whole limit, as of the view, before this instance's deltas
    if (info.numbers.algorithm == Algorithm::kFixedWindow) {
      d = algorithm::FixedWindowCheck(
              algorithm::FixedWindowState{entry.window_index,
                                          entry.view_current + entry.LocalCurrent()},
              now, params, item.cost)
              .decision;
      left = limit - entry.view_current;
    } else {
      d = algorithm::SlidingWindowCheck(
              algorithm::SlidingWindowState{entry.window_index,
                                            entry.view_current + entry.LocalCurrent(),
                                            entry.view_previous + entry.LocalPrevious()},
              now, params, item.cost)
              .decision;
      // The previous window is complete: this instance's own part of it counts too.
      const double weight =
          static_cast<double>(window - (now - entry.window_index * window)) / window;
      const double estimate =
          static_cast<double>(entry.view_previous + entry.LocalPrevious()) * weight +
          static_cast<double>(entry.view_current);
      left = static_cast<int64_t>(std::floor(limit - estimate + 1e-6));
    }
    d.source = DecisionSource::kSync;
    if (!d.allowed) return d;

    // The share rule: between two syncs, spend at most what the last sync granted, or
    // before the first sync of the window, 1/N of what the view leaves.
    const int64_t share =
        entry.grant_current >= 0 ? entry.grant_current : std::max<int64_t>(0, left) / instances;
    const int64_t local = entry.LocalCurrent();
    if (local + item.cost > share || (item.cost == 0 && local > share)) {
      d.allowed = false;
      d.reason = DenyReason::kOverLimit;
      d.remaining = 0;
      // The next sync of this key may bring a larger share; the next window surely does.
      d.retry_after_micros =
          std::clamp<int64_t>(entry.next_sync_micros - clock_now, 1, window_end - now);
      return d;
    }
    d.remaining = std::min(d.remaining, share - local - item.cost);
    entry.unsent_current += item.cost;
    return d;
  }

  // Items of keys beyond max_keys: a local limiter at floor(limit / N) per window, never
  // synced. Returns whether every such item passed (the memory store consumes only then).
  bool DecideOverflow(const std::vector<CheckItem>& items, const auto& pending, int64_t instances,
                      bool peek, std::vector<Decision>& decisions) {
    std::vector<Limit> shares;
    shares.reserve(items.size());
    std::vector<CheckItem> overflow_items;
    std::vector<size_t> positions;
    bool all_allowed = true;
    for (size_t i = 0; i < items.size(); ++i) {
      if (pending[i].entry != nullptr) continue;
      overflow_decisions_.fetch_add(1, std::memory_order_relaxed);
      Limit share = *items[i].limit;
      share.numbers.limit = items[i].limit->numbers.limit / instances;
      if (share.numbers.limit < 1) {
        Decision& d = decisions[i];
        d = Decision{.limit = items[i].limit->numbers.limit,
                     .reset_after_micros = items[i].limit->numbers.window_micros,
                     .retry_after_micros = items[i].limit->numbers.window_micros,
                     .source = DecisionSource::kSync,
                     .reason = DenyReason::kOverLimit};
        all_allowed = false;
        continue;
      }
      shares.push_back(std::move(share));
      overflow_items.push_back(CheckItem{&shares.back(), items[i].key, items[i].cost});
      positions.push_back(i);
    }
    if (peek || !all_allowed) {
      // Nothing may be consumed: ask the overflow limiter without consuming.
      for (CheckItem& item : overflow_items) item.cost = 0;
    }
    if (overflow_items.empty()) return all_allowed;
    absl::StatusOr<std::vector<Decision>> result = overflow_->Check(std::move(overflow_items));
    if (!result.ok()) return false;
    for (size_t j = 0; j < positions.size(); ++j) {
      Decision d = (*result)[j];
      d.source = DecisionSource::kSync;
      d.limit = items[positions[j]].limit->numbers.limit;
      decisions[positions[j]] = d;
      all_allowed = all_allowed && d.allowed;
    }
    return all_allowed;
  }

  std::shared_ptr<const KeyInfo> MakeInfo(const CheckItem& item) const {
    auto info = std::make_shared<KeyInfo>();
    info->limit_name = item.limit->name;
    info->numbers = item.limit->numbers;
    info->sync_interval_micros = item.limit->sync_interval_micros;
    info->redis_base = absl::StrCat(options_.key_prefix, item.limit->name, ":{", item.key, "}");
    return info;
  }

  static bool SameLimit(const KeyInfo& info, const Limit& limit) {
    return info.numbers.algorithm == limit.numbers.algorithm &&
           info.numbers.limit == limit.numbers.limit &&
           info.numbers.window_micros == limit.numbers.window_micros &&
           info.sync_interval_micros == limit.sync_interval_micros;
  }

  // Moves the entry to window `index` if that is later: the current window's counts become
  // the previous window's. Unsent units of a window older than the previous one are dropped.
  void Roll(Entry& entry, int64_t index) {
    if (index <= entry.window_index) return;
    int64_t dropped = entry.unsent_previous;
    int64_t carried = -1;
    if (index == entry.window_index + 1) {
      // A sliding window's estimate does not jump at the boundary, so its grant stays valid;
      // the other instances hold it for us until we sync the new window.
      if (entry.info->numbers.algorithm == Algorithm::kSlidingWindow && entry.grant_current >= 0) {
        carried = std::max<int64_t>(0, entry.grant_current - entry.LocalCurrent());
      }
      entry.view_previous = entry.view_current;
      entry.unsent_previous = entry.unsent_current;
      entry.unacked_previous = entry.unacked_current;
    } else {
      dropped += entry.unsent_current;
      entry.view_previous = entry.unsent_previous = entry.unacked_previous = 0;
    }
    entry.view_current = entry.unsent_current = entry.unacked_current = 0;
    entry.grant_current = carried;
    entry.grant_carried = carried >= 0;
    entry.window_index = index;
    if (dropped > 0) dropped_units_.fetch_add(dropped, std::memory_order_relaxed);
  }

  // A new key with a shorter interval than any before wakes the sync thread, which would
  // otherwise sleep out its old tick (1 s at first) before the key's first sync.
  void LowerTick(int64_t interval_micros) {
    int64_t tick = tick_micros_.load(std::memory_order_relaxed);
    while (interval_micros < tick) {
      if (tick_micros_.compare_exchange_weak(tick, interval_micros, std::memory_order_relaxed)) {
        absl::MutexLock lock(&thread_mu_);
        tick_lowered_ = true;
        return;
      }
    }
  }

  // ---- Sync thread -------------------------------------------------------------------

  bool Wake() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(thread_mu_) { return stopping_ || tick_lowered_; }

  void Loop() {
    absl::MutexLock lock(&thread_mu_);
    while (!stopping_) {
      const int64_t tick = tick_micros_.load(std::memory_order_relaxed);
      thread_mu_.AwaitWithTimeout(absl::Condition(this, &SyncStoreImpl::Wake),
                                  absl::Microseconds(tick));
      if (stopping_) break;
      if (tick_lowered_) {
        tick_lowered_ = false;  // wait one new tick: the new key is not due before that
        continue;
      }
      thread_mu_.Unlock();
      {
        absl::MutexLock sync_lock(&sync_mu_);
        (void)Round(/*force=*/false);
      }
      thread_mu_.Lock();
    }
  }

  void RefreshInstanceCount() {
    int64_t n = options_.instance_count ? options_.instance_count() : 1;
    instance_count_.store(std::max<int64_t>(1, n), std::memory_order_relaxed);
  }

  void SetOffset(int64_t redis_micros, int64_t before, int64_t after) {
    if (!options_.use_redis_time) return;
    // Redis read its clock somewhere between our two readings; the midpoint is off by at
    // most half the round trip.
    offset_micros_.store(redis_micros - (before + (after - before) / 2), std::memory_order_relaxed);
  }

  // One round: collect due keys into a batch, send it after the unacknowledged ones, apply
  // the reply.
  absl::Status Round(bool force) ABSL_EXCLUSIVE_LOCKS_REQUIRED(sync_mu_) {
    RefreshInstanceCount();
    const int64_t clock_now = clock_->NowMicros();
    const int64_t now = Now(clock_now);

    Batch batch;
    batch.sequence = ++sequence_;
    for (int s = 0; s <= shard_mask_; ++s) {
      Shard& shard = shards_[s];
      ShardLock lock(&shard.mu);
      for (auto it = shard.entries.begin(); it != shard.entries.end();) {
        Entry& entry = it->second;
        const KeyInfo& info = *entry.info;
        const int64_t window = info.numbers.window_micros;
        const bool cold =
            entry.last_check_micros < clock_now - kColdIntervals * info.sync_interval_micros;
        if (cold && !entry.HasDeltas() && now >= entry.ExpiresAtMicros()) {
          shard.entries.erase(it++);
          keys_tracked_.fetch_sub(1, std::memory_order_relaxed);
          continue;
        }
        Roll(entry, algorithm::WindowIndex(now, window));
        const bool due = force || clock_now >= entry.next_sync_micros;
        if (!due || (cold && entry.unsent_current == 0 && entry.unsent_previous == 0)) {
          ++it;
          continue;
        }
        entry.next_sync_micros = clock_now + info.sync_interval_micros;
        const int64_t w = entry.window_index;
        const bool sliding = info.numbers.algorithm == Algorithm::kSlidingWindow;
        // The previous window first: a sliding window's grant weighs its total.
        if (sliding || entry.unsent_previous > 0) {
          batch.items.push_back(BatchItem{it->first, absl::StrCat(info.redis_base, ":", w - 1),
                                          w - 1, window, entry.unsent_previous,
                                          CeilMillis((w + 1) * window - now)});
          entry.unacked_previous += entry.unsent_previous;
          entry.unsent_previous = 0;
        }
        batch.items.push_back(BatchItem{it->first, absl::StrCat(info.redis_base, ":", w), w, window,
                                        entry.unsent_current, CeilMillis((w + 2) * window - now),
                                        info.numbers.limit, sliding ? window : 0});
        entry.unacked_current += entry.unsent_current;
        entry.unsent_current = 0;
        keys_synced_.fetch_add(1, std::memory_order_relaxed);
        ++it;
      }
    }

    // Earlier batches lose the counters of windows that ended since (no decision reads them
    // any more), and their reads: only the last batch's totals and grants are used, so an
    // item without a delta has nothing left to do. A batch left empty is forgotten, so
    // failed rounds without deltas do not pile up while Redis is away.
    for (auto batch_it = pending_.begin(); batch_it != pending_.end();) {
      std::vector<BatchItem>& items = batch_it->items;
      auto stale = std::remove_if(items.begin(), items.end(), [&](const BatchItem& item) {
        return item.delta == 0 ||
               item.window_index < algorithm::WindowIndex(now, item.window_micros) - 1;
      });
      for (auto it = stale; it != items.end(); ++it) {
        dropped_units_.fetch_add(it->delta, std::memory_order_relaxed);
      }
      items.erase(stale, items.end());
      batch_it = items.empty() ? pending_.erase(batch_it) : std::next(batch_it);
    }
    if (batch.items.empty() && pending_.empty()) return absl::OkStatus();
    pending_.push_back(std::move(batch));
    while (pending_.size() > kMaxPendingBatches) {
      Release(pending_.front(), nullptr);
      for (const BatchItem& item : pending_.front().items) {
        dropped_units_.fetch_add(item.delta, std::memory_order_relaxed);
      }
      pending_.pop_front();
    }

    const int64_t before = clock_->NowMicros();
    absl::StatusOr<RedisReply> reply = Eval();
    if (options_.before_reply_applied) options_.before_reply_applied();
    const int64_t after = clock_->NowMicros();
    absl::Status status = reply.status();
    const Batch& last = pending_.back();
    if (status.ok() && (reply->type != RedisReply::Type::kArray ||
                        reply->elements.size() != 2 * last.items.size() + 1)) {
      status = absl::InternalError(absl::StrCat("sync script: ", DebugString(*reply)));
    }
    if (!status.ok()) {
      sync_failures_.fetch_add(1, std::memory_order_relaxed);
      return status;
    }
    SetOffset(reply->elements[0].integer, before, after);
    for (size_t b = 0; b + 1 < pending_.size(); ++b) Release(pending_[b], nullptr);
    Release(last, &reply->elements);
    pending_.clear();
    syncs_.fetch_add(1, std::memory_order_relaxed);
    last_success_micros_.store(after, std::memory_order_relaxed);
    return absl::OkStatus();
  }

  // One EVALSHA for every pending batch; EVAL when Redis lost the script.
  absl::StatusOr<RedisReply> Eval() ABSL_EXCLUSIVE_LOCKS_REQUIRED(sync_mu_) {
    std::vector<std::string> args = {"EVALSHA", script_sha_, ""};
    int64_t keys = 1;
    args.push_back(sequence_key_);
    for (const Batch& batch : pending_) {
      for (const BatchItem& item : batch.items) args.push_back(item.redis_key);
      keys += static_cast<int64_t>(batch.items.size());
    }
    args[2] = absl::StrCat(keys);
    args.push_back(absl::StrCat(kSequenceTtlMs));
    args.push_back(instance_id_);
    args.push_back(absl::StrCat(instance_count_.load(std::memory_order_relaxed)));
    // Redis weighs sliding windows at its own time, unless the store's clock is not Redis
    // time (a simulated clock in tests and benchmarks).
    args.push_back(options_.use_redis_time ? "0" : absl::StrCat(clock_->NowMicros()));
    args.push_back(absl::StrCat(pending_.size()));
    for (const Batch& batch : pending_) {
      args.push_back(absl::StrCat(batch.sequence));
      args.push_back(absl::StrCat(batch.items.size()));
      for (const BatchItem& item : batch.items) {
        args.push_back(absl::StrCat(item.delta));
        args.push_back(absl::StrCat(item.ttl_ms));
        args.push_back(absl::StrCat(item.limit));
        args.push_back(absl::StrCat(item.sliding_window_micros));
        args.push_back(absl::StrCat(item.window_index));
      }
    }
    absl::StatusOr<RedisReply> reply = Command(args);
    if (reply.ok() && reply->is_error() && absl::StartsWith(reply->str, "NOSCRIPT")) {
      args[0] = "EVAL";
      args[1] = sync::kSyncScript;
      reply = Command(args);
    }
    if (reply.ok() && reply->is_error()) {
      return absl::InternalError(absl::StrCat("sync script failed: ", reply->str));
    }
    return reply;
  }

  absl::StatusOr<RedisReply> Command(const std::vector<std::string>& args) {
    redis_commands_.fetch_add(1, std::memory_order_relaxed);
    // The connection fails the command after sync_timeout_ms without a reply.
    return client_->Command(args);
  }

  // Takes a batch's units out of its entries' `unacked` (acknowledged or given up), and,
  // with `totals`, replaces their views with the totals read from Redis.
  void Release(const Batch& batch, const std::vector<RedisReply>* totals) {
    for (size_t i = 0; i < batch.items.size(); ++i) {
      const BatchItem& item = batch.items[i];
      const size_t hash = absl::HashOf(absl::string_view(item.map_key));
      Shard& shard = ShardFor(hash);
      ShardLock lock(&shard.mu);
      auto it = shard.entries.find(absl::string_view(item.map_key));
      if (it == shard.entries.end()) continue;
      Entry& entry = it->second;
      const int64_t* total = totals != nullptr ? &(*totals)[2 * i + 1].integer : nullptr;
      const int64_t grant = totals != nullptr ? (*totals)[2 * i + 2].integer : -1;
      if (entry.window_index == item.window_index) {
        entry.unacked_current = std::max<int64_t>(0, entry.unacked_current - item.delta);
        if (total != nullptr) entry.view_current = *total;
        if (grant >= 0) {
          entry.grant_current = grant;
          entry.grant_carried = false;
        }
      } else if (entry.window_index == item.window_index + 1) {
        entry.unacked_previous = std::max<int64_t>(0, entry.unacked_previous - item.delta);
        if (total != nullptr) entry.view_previous = *total;
        // The reply to a sync sent before a sliding window's boundary: its grant (what the
        // others now hold for us) replaces the one carried over, less what was admitted
        // since that sync's batch was taken (`unsent_previous`, and this window's units).
        if (grant >= 0 && entry.grant_carried) {
          entry.grant_current = std::max<int64_t>(0, grant - entry.unsent_previous);
        }
      }
    }
  }

  const SyncStoreOptions options_;
  Clock* const clock_;
  const std::unique_ptr<redis::RedisClient> client_;
  const std::string script_sha_;
  const std::string instance_id_;
  const std::string sequence_key_;
  const std::unique_ptr<MemoryStore> overflow_;
  const std::unique_ptr<Shard[]> shards_;
  const int shard_mask_;

  std::atomic<int64_t> instance_count_{1};
  std::atomic<int64_t> offset_micros_{0};
  std::atomic<int64_t> last_success_micros_{0};
  std::atomic<int64_t> tick_micros_{1'000'000};

  std::atomic<int64_t> syncs_{0};
  std::atomic<int64_t> sync_failures_{0};
  std::atomic<int64_t> redis_commands_{0};
  std::atomic<int64_t> keys_tracked_{0};
  std::atomic<int64_t> keys_synced_{0};
  std::atomic<int64_t> overflow_decisions_{0};
  std::atomic<int64_t> dropped_units_{0};

  absl::Mutex sync_mu_;  // one round at a time
  int64_t sequence_ ABSL_GUARDED_BY(sync_mu_) = 0;
  std::deque<Batch> pending_ ABSL_GUARDED_BY(sync_mu_);

  absl::Mutex thread_mu_;
  bool stopping_ ABSL_GUARDED_BY(thread_mu_) = false;
  bool tick_lowered_ ABSL_GUARDED_BY(thread_mu_) = false;
  std::thread thread_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SyncStore>> SyncStore::Create(SyncStoreOptions options) {
  absl::StatusOr<redis::RedisUrl> url = redis::ParseRedisUrl(options.redis_url);
  if (!url.ok()) return url.status();
  if (options.max_keys < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("SyncStoreOptions.max_keys must be >= 1, got ", options.max_keys));
  }
  if (options.shards < 1 || options.shards > kMaxShards) {
    return absl::InvalidArgumentError(
        absl::StrCat("SyncStoreOptions.shards must be in 1..", kMaxShards));
  }
  if (options.sync_timeout_ms < 1 || options.connect_timeout_ms < 1 ||
      options.reconnect_min_ms < 1 || options.reconnect_max_ms < options.reconnect_min_ms) {
    return absl::InvalidArgumentError(
        "SyncStoreOptions: timeouts must be >= 1 ms and reconnect_max_ms >= reconnect_min_ms");
  }
  int shards = 1;
  while (shards < options.shards) shards *= 2;

  redis::ClientOptions client_options;
  // One connection: the batches of consecutive rounds reach Redis in order.
  client_options.connections = 1;
  client_options.connection.url = *std::move(url);
  client_options.connection.connect_timeout = std::chrono::milliseconds(options.connect_timeout_ms);
  client_options.connection.reply_timeout = std::chrono::milliseconds(options.sync_timeout_ms);
  client_options.connection.reconnect_min = std::chrono::milliseconds(options.reconnect_min_ms);
  client_options.connection.reconnect_max = std::chrono::milliseconds(options.reconnect_max_ms);
  absl::StatusOr<std::unique_ptr<redis::RedisClient>> client =
      redis::RedisClient::Connect(client_options);
  if (!client.ok()) return client.status();
  absl::StatusOr<RedisReply> loaded =
      (*client)->Command({"SCRIPT", "LOAD", std::string(sync::kSyncScript)});
  if (!loaded.ok()) return loaded.status();
  if (loaded->type != RedisReply::Type::kString) {
    return absl::InternalError(
        absl::StrCat("SCRIPT LOAD of the sync script failed: ", DebugString(*loaded)));
  }
  absl::StatusOr<std::unique_ptr<MemoryStore>> overflow =
      MemoryStore::Create({.clock = options.clock, .max_keys = options.max_keys});
  if (!overflow.ok()) return overflow.status();

  const bool start_thread = options.start_sync_thread;
  auto store = std::make_unique<SyncStoreImpl>(std::move(options), *std::move(client), loaded->str,
                                               *std::move(overflow), shards);
  if (absl::Status status = store->LearnClockOffset(); !status.ok()) return status;
  if (start_thread) store->StartThread();
  return store;
}

}  // namespace tollgate
