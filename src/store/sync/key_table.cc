// Copyright tollgate authors.
#include "src/store/sync/key_table.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "src/algorithm/fixed_window.h"
#include "src/algorithm/share.h"
#include "src/core/batch.h"
#include "src/store/redis/router.h"
#include "src/store/redis/slot.h"

namespace tollgate::sync {
namespace {

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

// A shard's lock: a plain futex-based mutex (std::mutex), not absl::Mutex, whose Debian
// build runs deadlock detection on every Lock unless the embedding program turns it off; the
// request path does not depend on what the embedding program does.
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

absl::Status ValidateItem(const CheckItem& item) {
  if (item.limit == nullptr) return absl::InvalidArgumentError("check item without a limit");
  if (item.key.empty()) return absl::InvalidArgumentError("empty key");
  if (item.cost < 0) return absl::InvalidArgumentError("negative cost");
  const Limit& limit = *item.limit;
  if (limit.mode != Mode::kSync) {
    return absl::InvalidArgumentError(
        absl::StrCat("limit \"", limit.name, "\" is not in sync mode (mode: sync)"));
  }
  // In sync mode: a window limit with a sync interval the rounds can keep.
  return ValidateLimit(limit);
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

bool SameLimit(const KeyInfo& info, const Limit& limit) {
  return info.numbers.algorithm == limit.numbers.algorithm &&
         info.numbers.limit == limit.numbers.limit &&
         info.numbers.window_micros == limit.numbers.window_micros &&
         info.sync_interval_micros == limit.sync_interval_micros && info.shares == limit.shares;
}

}  // namespace

struct alignas(64) KeyTable::Shard {
  ShardMutex mu;
  absl::flat_hash_map<std::string, Entry, KeyHash, KeyEq> entries ABSL_GUARDED_BY(mu);
};

// One item of a batch check: its table key and where its entry is.
struct KeyTable::Pending {
  std::string bytes;
  size_t hash = 0;
  Shard* shard = nullptr;
  Entry* entry = nullptr;  // nullptr: beyond max_keys, decided by `overflow_`
};

absl::StatusOr<std::unique_ptr<KeyTable>> KeyTable::Create(KeyTableOptions options) {
  if (options.clock == nullptr) return absl::InvalidArgumentError("KeyTable needs a clock");
  if (options.max_keys < 1 || options.shards < 1 || (options.shards & (options.shards - 1)) != 0) {
    return absl::InvalidArgumentError("KeyTable: max_keys >= 1 and shards a power of 2");
  }
  absl::StatusOr<std::unique_ptr<MemoryStore>> overflow =
      MemoryStore::Create({.clock = options.clock, .max_keys = options.max_keys});
  if (!overflow.ok()) return overflow.status();
  return std::unique_ptr<KeyTable>(new KeyTable(std::move(options), *std::move(overflow)));
}

KeyTable::KeyTable(KeyTableOptions options, std::unique_ptr<MemoryStore> overflow)
    : options_(std::move(options)),
      clock_(options_.clock),
      overflow_(std::move(overflow)),
      shards_(std::make_unique<Shard[]>(options_.shards)),
      shard_mask_(options_.shards - 1) {
  last_sync_micros_.store(clock_->NowMicros(), std::memory_order_relaxed);
}

KeyTable::~KeyTable() = default;

void KeyTable::SetInstances(int64_t instances) {
  instances_.store(std::max<int64_t>(1, instances), std::memory_order_relaxed);
}
void KeyTable::SetClockOffset(int64_t micros) {
  offset_micros_.store(micros, std::memory_order_relaxed);
}
void KeyTable::SetLastSync(int64_t clock_micros) {
  last_sync_micros_.store(clock_micros, std::memory_order_relaxed);
}
void KeyTable::AddDroppedUnits(int64_t units) {
  if (units > 0) dropped_units_.fetch_add(units, std::memory_order_relaxed);
}

DecideContext KeyTable::Context(int64_t clock_micros) const {
  return DecideContext{.clock_micros = clock_micros,
                       .now_micros = Now(clock_micros),
                       .instances = instances_.load(std::memory_order_relaxed),
                       .last_sync_micros = last_sync_micros_.load(std::memory_order_relaxed)};
}

KeyTable::Shard& KeyTable::ShardFor(size_t hash) const {
  return shards_[static_cast<int>((hash >> 48) & static_cast<size_t>(shard_mask_))];
}

absl::StatusOr<std::vector<Decision>> KeyTable::Check(const std::vector<CheckItem>& items) {
  if (items.empty()) return absl::InvalidArgumentError("no check items");
  for (const CheckItem& item : items) {
    if (absl::Status status = ValidateItem(item); !status.ok()) return status;
  }
  if (items.size() == 1) {
    if (std::optional<Decision> decision = CheckTracked(items[0])) {
      return std::vector<Decision>{*decision};
    }
  }
  return CheckBatch(items);
}

std::optional<Decision> KeyTable::CheckTracked(const CheckItem& item) {
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
  const DecideContext context = Context(clock_->NowMicros());
  int64_t dropped = 0;
  std::optional<Decision> decision;
  {
    ShardLock lock(&shard.mu);
    auto it = shard.entries.find(key);
    if (it == shard.entries.end() || !SameLimit(*it->second.info, *item.limit)) {
      return std::nullopt;
    }
    decision = Decide(it->second, item.limit->on_store_failure, item.cost, context, &dropped);
  }
  AddDroppedUnits(dropped);
  return decision;
}

std::vector<Decision> KeyTable::CheckBatch(const std::vector<CheckItem>& items) {
  const int64_t clock_now = clock_->NowMicros();
  const DecideContext context = Context(clock_now);
  std::vector<Decision> decisions(items.size());

  std::vector<Pending> pending(items.size());
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

  // Find or create every entry first; pointers are taken after the last insertion, since an
  // insertion may rehash the map.
  bool any_overflow = false;
  int64_t new_interval = 0;  // the shortest interval of a key created here
  for (size_t i = 0; i < items.size(); ++i) {
    Pending& p = pending[i];
    auto it = p.shard->entries.find(absl::string_view(p.bytes));
    if (it != p.shard->entries.end() && SameLimit(*it->second.info, *items[i].limit)) continue;
    if (it == p.shard->entries.end()) {
      if (keys_tracked_.load(std::memory_order_relaxed) >= options_.max_keys) {
        any_overflow = true;
        continue;
      }
      keys_tracked_.fetch_add(1, std::memory_order_relaxed);
      it = p.shard->entries.emplace(p.bytes, Entry{}).first;
    }
    // A new key, or a limit redefined (start over with its new numbers).
    it->second = NewEntry(MakeInfo(items[i]), clock_now, context.now_micros);
    const int64_t interval = it->second.info->sync_interval_micros;
    if (new_interval == 0 || interval < new_interval) new_interval = interval;
  }
  for (Pending& p : pending) {
    auto it = p.shard->entries.find(absl::string_view(p.bytes));
    p.entry = it == p.shard->entries.end() ? nullptr : &it->second;
  }

  // Decide each item and consume at once (a later item of the same key sees it); undo every
  // consumption if any item is refused.
  bool all_allowed = true;
  int64_t dropped = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (pending[i].entry == nullptr) continue;
    decisions[i] = Decide(*pending[i].entry, items[i].limit->on_store_failure, items[i].cost,
                          context, &dropped);
    all_allowed = all_allowed && (decisions[i].allowed || items[i].shadow);
  }
  if (any_overflow) {
    // After a refusal the overflow items are only peeked at, so nothing is consumed.
    all_allowed =
        CheckOverflow(items, pending, context.instances, /*peek=*/!all_allowed, decisions) &&
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
  AddDroppedUnits(dropped);
  if (new_interval > 0) LowerShortestInterval(new_interval);
  return decisions;
}

bool KeyTable::CheckOverflow(const std::vector<CheckItem>& items,
                             const std::vector<Pending>& pending, int64_t instances, bool peek,
                             std::vector<Decision>& decisions) {
  std::vector<Limit> shares;
  shares.reserve(items.size());
  std::vector<CheckItem> overflow_items;
  std::vector<size_t> positions;
  bool all_allowed = true;
  for (size_t i = 0; i < items.size(); ++i) {
    if (pending[i].entry != nullptr) continue;
    overflow_decisions_.fetch_add(1, std::memory_order_relaxed);
    const LimitNumbers& numbers = items[i].limit->numbers;
    Limit share = *items[i].limit;
    // What the others hold back for an instance that never syncs the key.
    share.numbers.limit = algorithm::FirstShare(static_cast<double>(numbers.limit), instances,
                                                items[i].limit->shares);
    if (share.numbers.limit < 1) {
      decisions[i] = Decision{.limit = numbers.limit,
                              .reset_after_micros = numbers.window_micros,
                              .retry_after_micros = numbers.window_micros,
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
  absl::StatusOr<std::vector<Decision>> result = overflow_->Apply(std::move(overflow_items));
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

std::shared_ptr<const KeyInfo> KeyTable::MakeInfo(const CheckItem& item) const {
  auto info = std::make_shared<KeyInfo>();
  info->limit_name = item.limit->name;
  info->numbers = item.limit->numbers;
  info->sync_interval_micros = item.limit->sync_interval_micros;
  info->shares = item.limit->shares;
  info->counter_base = absl::StrCat(options_.key_prefix, item.limit->name, ":{", item.key, "}");
  info->slot = options_.group_by_slot ? redis::KeySlot(info->counter_base) : redis::kAnySlot;
  return info;
}

void KeyTable::LowerShortestInterval(int64_t interval_micros) {
  int64_t shortest = shortest_interval_.load(std::memory_order_relaxed);
  while (interval_micros < shortest) {
    if (shortest_interval_.compare_exchange_weak(shortest, interval_micros,
                                                 std::memory_order_relaxed)) {
      if (options_.on_shorter_interval) options_.on_shorter_interval(interval_micros);
      return;
    }
  }
}

std::vector<CounterItem> KeyTable::TakeCounters(bool force) {
  const int64_t clock_now = clock_->NowMicros();
  const int64_t now = Now(clock_now);
  std::vector<CounterItem> items;
  int64_t dropped = 0;
  for (int s = 0; s <= shard_mask_; ++s) {
    Shard& shard = shards_[s];
    ShardLock lock(&shard.mu);
    for (auto it = shard.entries.begin(); it != shard.entries.end();) {
      Entry& entry = it->second;
      if (Forgettable(entry, clock_now, now)) {
        shard.entries.erase(it++);
        keys_tracked_.fetch_sub(1, std::memory_order_relaxed);
        continue;
      }
      dropped += Roll(entry, algorithm::WindowIndex(now, entry.info->numbers.window_micros));
      if (sync::TakeCounters(entry, it->first, clock_now, now, force, items)) {
        keys_synced_.fetch_add(1, std::memory_order_relaxed);
      }
      ++it;
    }
  }
  AddDroppedUnits(dropped);
  return items;
}

void KeyTable::Apply(const std::vector<CounterItem>& items,
                     const std::vector<CounterReply>* replies) {
  for (size_t i = 0; i < items.size(); ++i) {
    const CounterItem& item = items[i];
    Shard& shard = ShardFor(absl::HashOf(absl::string_view(item.entry_key)));
    ShardLock lock(&shard.mu);
    auto it = shard.entries.find(absl::string_view(item.entry_key));
    if (it == shard.entries.end()) continue;
    ApplyReply(it->second, item, replies != nullptr ? &(*replies)[i] : nullptr);
  }
}

}  // namespace tollgate::sync
