// Copyright tollgate authors.
//
// Layout: `shards` independent hash tables, each behind its own absl::Mutex. An entry (a Record,
// one 64-byte cache line) holds the limit name and key, one algorithm state and the time it
// stops mattering. Each shard keeps a min-heap of (expires_at, key) with exactly one record per
// entry; a record's time may be older than its entry's (an entry's expiry moves later as it is
// used, and rewriting the heap on every check would cost O(log n)), so a popped record whose entry
// lives longer is pushed again with the real time. A key that is used keeps one heap record and
// costs one re-push per lifetime extension at most.
//
// Bound: shard i may hold cap_i entries, where the caps add up to exactly `max_keys`
// (the shard count is lowered to at most max_keys so every cap is >= 1). A new key in a full
// shard first sweeps that shard's expired entries; if it is still full, the entry that
// would expire soonest (by its real expiry, not a stale heap time) is evicted. A key in
// active use has its expiry pushed later with every consuming check, so it is evicted only
// after every idler key of its shard.
#include "tollgate/memory_store.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "absl/base/thread_annotations.h"
#include "absl/container/inlined_vector.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "src/algorithm/fixed_window.h"
#include "src/algorithm/sliding_window.h"
#include "src/algorithm/token_bucket.h"
#include "src/core/batch.h"
#include "src/store/memory/line_table.h"

namespace tollgate {
namespace {

using algorithm::FixedWindowState;
using algorithm::SlidingWindowState;
using algorithm::TokenBucketState;

// The most expired entries one check removes from its shard before doing its own work.
constexpr int kSweepPerCheck = 4;
constexpr int kMaxShards = 1 << 16;

using AnyState = std::variant<TokenBucketState, FixedWindowState, SlidingWindowState>;

// A limit name and a key owned by someone else, and their HashKey(): what a check looks up.
struct KeyView {
  std::string_view name;
  std::string_view key;
  size_t hash = 0;

  bool operator==(const KeyView& other) const {
    return hash == other.hash && name == other.name && key == other.key;
  }
};

// The hash of a limit name under a store's seed (what a PreparedLimit holds), and of a key
// under that: HashKey(seed, name, key) == KeyHash(NameHash(seed, name), key), so a check
// through a PreparedLimit finds the entries a check by Limit made. absl::Hash, from its two
// parts: no composed copy is needed to look a key up.
inline uint64_t NameHash(uint64_t seed, std::string_view name) { return absl::HashOf(seed, name); }
inline size_t KeyHash(uint64_t name_hash, std::string_view key) {
  return absl::HashOf(name_hash, key);
}
inline size_t HashKey(uint64_t seed, std::string_view name, std::string_view key) {
  return KeyHash(NameHash(seed, name), key);
}

template <typename S>
struct StateKindOf;
template <>
struct StateKindOf<TokenBucketState> : std::integral_constant<uint8_t, 1> {};
template <>
struct StateKindOf<FixedWindowState> : std::integral_constant<uint8_t, 2> {};
template <>
struct StateKindOf<SlidingWindowState> : std::integral_constant<uint8_t, 3> {};

// One entry of a shard's table (a LineTable), in exactly one cache line, so a check of a key
// that is not in the cache waits for this one line (docs/design/memory.md, "Layout"). The line
// holds, in this order:
//
//   - the name's size (6 bits) and the algorithm (2 bits) in one byte;
//   - when the entry expires, in microseconds since the epoch, in 7 bytes (signed: years 828
//     to 3112; one 8-byte load and a shift). A later expiry (a bucket that refills over
//     centuries) is kept as the latest one, so such an entry may be swept in the year 3112;
//     an earlier one, as the earliest;
//   - the key's size in one byte;
//   - the name's and the key's bytes, when they fit beside the state: up to 47 bytes together
//     for a token bucket (an 8-byte state), 39 for a fixed window (16), 31 for a sliding
//     window (24). Longer ones live on the heap, one more miss for them. An entry whose
//     algorithm changes (its limit was redefined) to one with a larger state moves its key
//     to the heap if it no longer fits;
//   - the algorithm's state, in the line's last bytes.
//
// The table hashes and compares entries by their name and key alone, whose bytes never
// change (only where they are kept). All-zero bytes (algorithm 0) are a vacant line.
class alignas(64) Record {
 public:
  // An entry for a state of algorithm `kind` (a StateKindOf<S>::value), to be set next.
  Record(std::string_view name, std::string_view key, uint8_t kind) {
    std::memset(line_, 0, kStart);
    SetKind(kind);
    if (name.size() + key.size() <= InlineBytes(kind)) {
      SetSizes(name.size(), key.size());
      std::memcpy(line_ + kStart, name.data(), name.size());
      std::memcpy(line_ + kStart + name.size(), key.data(), key.size());
    } else {
      StoreOutside(name, key);
    }
  }
  // Moves the key (a heap one by its pointer), the state and the expiry.
  Record(Record&& other) noexcept {
    std::memcpy(line_, other.line_, sizeof(line_));
    other.SetSizes(0, 0);  // other keeps nothing to free
  }
  Record(const Record&) = delete;
  Record& operator=(const Record&) = delete;
  Record& operator=(Record&&) = delete;
  ~Record() {
    if (NameSize() == kOutside) delete[] outside().bytes;
  }
  // Whether `line` holds no entry (LineTable's contract): every entry's algorithm is 1 to 3.
  static bool Vacant(const Record& line) { return line.Kind() == 0; }

  // Whether this entry's name and key are `key`'s (its hash is not compared).
  ABSL_ATTRIBUTE_ALWAYS_INLINE bool Is(const KeyView& key) const {
    const size_t name_size = NameSize();
    if (ABSL_PREDICT_TRUE(name_size != kOutside)) {
      const char* bytes = Bytes();
      return std::string_view(bytes, name_size) == key.name &&
             std::string_view(bytes + name_size, KeySize()) == key.key;
    }
    return name() == key.name && this->key() == key.key;
  }
  std::string_view name() const {
    if (NameSize() != kOutside) return {Bytes(), NameSize()};
    const Outside o = outside();
    return {o.bytes, o.name_size};
  }
  std::string_view key() const {
    if (NameSize() != kOutside) return {Bytes() + NameSize(), KeySize()};
    const Outside o = outside();
    return {o.bytes + o.name_size, o.key_size};
  }

  // Whether the state is one of algorithm S's.
  template <typename S>
  bool Holds() const {
    return Kind() == StateKindOf<S>::value;
  }
  // REQUIRES: Holds<S>().
  template <typename S>
  S Get() const {
    const unsigned char* at = line_ + sizeof(line_) - sizeof(S);
    if constexpr (std::is_same_v<S, TokenBucketState>) {
      return S{std::bit_cast<double>(Load(at))};
    } else if constexpr (std::is_same_v<S, FixedWindowState>) {
      return S{Load(at), Load(at + 8)};
    } else {
      return S{Load(at), Load(at + 8), Load(at + 16)};
    }
  }
  template <typename S>
  void Set(const S& state) const {
    if (ABSL_PREDICT_FALSE(Kind() != StateKindOf<S>::value)) Rekind(StateKindOf<S>::value);
    Replace(state);
  }
  // Set() for a state of the algorithm the entry already holds. REQUIRES: Holds<S>().
  template <typename S>
  void Replace(const S& state) const {
    unsigned char* at = line_ + sizeof(line_) - sizeof(S);
    if constexpr (std::is_same_v<S, TokenBucketState>) {
      Store(at, std::bit_cast<int64_t>(state.empty_at_micros));
    } else if constexpr (std::is_same_v<S, FixedWindowState>) {
      Store(at, state.window_index);
      Store(at + 8, state.count);
    } else {
      Store(at, state.window_index);
      Store(at + 8, state.current);
      Store(at + 16, state.previous);
    }
  }
  AnyState GetAny() const {
    switch (Kind()) {
      case StateKindOf<FixedWindowState>::value:
        return Get<FixedWindowState>();
      case StateKindOf<SlidingWindowState>::value:
        return Get<SlidingWindowState>();
      default:
        return Get<TokenBucketState>();
    }
  }
  void SetAny(const AnyState& state) const {
    std::visit([this](const auto& s) { Set(s); }, state);
  }

  // When the state stops mattering (see Outcome::expires_at_micros), within the range above.
  int64_t expires_at_micros() const {
    uint64_t word;
    std::memcpy(&word, line_, sizeof(word));
    return static_cast<int64_t>(word) >> 8;  // the high 56 bits, sign-extended
  }
  void set_expires_at_micros(int64_t micros) const {
    if (ABSL_PREDICT_FALSE(static_cast<uint64_t>(micros) - static_cast<uint64_t>(kEarliest) >
                           static_cast<uint64_t>(kLatest - kEarliest))) {
      micros = micros < kEarliest ? kEarliest : kLatest;
    }
    const uint64_t word = static_cast<uint64_t>(micros) << 8 | line_[kNameSizeAndKind];
    std::memcpy(line_, &word, sizeof(word));
  }

 private:
  static constexpr int64_t kLatest = (int64_t{1} << 55) - 1;
  static constexpr int64_t kEarliest = -(int64_t{1} << 55);
  // Offsets in the line. The byte with the name's size and the algorithm is the low byte of
  // the first 8, whose high 7 bytes are the expiry; then the key's size; then the bytes.
  static constexpr size_t kNameSizeAndKind = 0;
  static constexpr size_t kKeySize = 8;
  static constexpr size_t kStart = 9;
  static constexpr size_t kBytes = 64 - kStart;  // for the key and the state
  // NameSize() of a key kept on the heap.
  static constexpr size_t kOutside = 63;
  // What the line holds at kStart for a key kept on the heap: name then key, and their sizes.
  struct Outside {
    char* bytes;
    size_t name_size;
    size_t key_size;
  };

  static size_t StateSize(uint8_t kind) {
    switch (kind) {
      case StateKindOf<FixedWindowState>::value:
        return sizeof(FixedWindowState);
      case StateKindOf<SlidingWindowState>::value:
        return sizeof(SlidingWindowState);
      default:
        return sizeof(TokenBucketState);
    }
  }
  // A state's fields are read and written one by one, as values, so the state can stay in
  // registers through the algorithm (docs/design/memory.md, step 4).
  static int64_t Load(const unsigned char* at) {
    int64_t field;
    std::memcpy(&field, at, sizeof(field));
    return field;
  }
  static void Store(unsigned char* at, int64_t field) { std::memcpy(at, &field, sizeof(field)); }

  // How many name and key bytes fit beside a state of `kind`.
  static size_t InlineBytes(uint8_t kind) { return kBytes - StateSize(kind); }

  size_t NameSize() const { return line_[kNameSizeAndKind] & 63; }
  size_t KeySize() const { return line_[kKeySize]; }
  uint8_t Kind() const { return line_[kNameSizeAndKind] >> 6; }
  const char* Bytes() const { return reinterpret_cast<const char*>(line_ + kStart); }
  void SetSizes(size_t name_size, size_t key_size) const {
    line_[kNameSizeAndKind] =
        static_cast<unsigned char>((line_[kNameSizeAndKind] & ~63) | name_size);
    line_[kKeySize] = static_cast<unsigned char>(key_size);
  }
  void SetKind(uint8_t kind) const {
    line_[kNameSizeAndKind] =
        static_cast<unsigned char>((line_[kNameSizeAndKind] & 63) | kind << 6);
  }
  Outside outside() const {
    Outside o;
    std::memcpy(&o, line_ + kStart, sizeof(o));
    return o;
  }
  void StoreOutside(std::string_view name, std::string_view key) const {
    const Outside o{new char[name.size() + key.size()], name.size(), key.size()};
    std::memcpy(o.bytes, name.data(), name.size());
    std::memcpy(o.bytes + name.size(), key.data(), key.size());
    std::memcpy(line_ + kStart, &o, sizeof(o));
    SetSizes(kOutside, 0);
  }
  // Makes room for a state of `kind`: the key moves to the heap if it no longer fits.
  ABSL_ATTRIBUTE_NOINLINE void Rekind(uint8_t kind) const {
    if (NameSize() != kOutside && NameSize() + KeySize() > InlineBytes(kind)) {
      const std::string copy(Bytes(), NameSize() + KeySize());
      StoreOutside(std::string_view(copy).substr(0, NameSize()),
                   std::string_view(copy).substr(NameSize()));
    }
    SetKind(kind);
  }

  mutable unsigned char line_[64];
};
static_assert(sizeof(Record) == 64, "one entry, one cache line");
static_assert(sizeof(SlidingWindowState) >= sizeof(FixedWindowState) &&
              sizeof(SlidingWindowState) >= sizeof(TokenBucketState));

// Hashes an entry as its KeyView is hashed (the table recomputes entries' hashes only when
// it grows, shrinks or shifts an entry back). Stateful: it holds the store's seed.
struct RecordHash {
  using is_transparent = void;
  uint64_t seed = 0;
  size_t operator()(const Record& record) const {
    return HashKey(seed, record.name(), record.key());
  }
  size_t operator()(const KeyView& key) const { return key.hash; }
};

struct RecordEq {
  using is_transparent = void;
  bool operator()(const Record& a, const Record& b) const {
    return a.name() == b.name() && a.key() == b.key();
  }
  ABSL_ATTRIBUTE_ALWAYS_INLINE bool operator()(const Record& a, const KeyView& b) const {
    return a.Is(b);
  }
  bool operator()(const KeyView& a, const Record& b) const { return b.Is(a); }
};

// A copy of a stored key for the expiry heap, with its hash: finding its entry again costs
// no hashing. Keys up to kInlineBytes live inside the record.
class StoredKey {
 public:
  static constexpr size_t kInlineBytes = 32;

  explicit StoredKey(const KeyView& key)
      : hash_(key.hash), name_size_(key.name.size()), key_size_(key.key.size()) {
    char* data = Allocate();
    std::memcpy(data, key.name.data(), name_size_);
    std::memcpy(data + name_size_, key.key.data(), key_size_);
  }
  StoredKey(const StoredKey& other) = delete;
  StoredKey(StoredKey&& other) noexcept
      : hash_(other.hash_), name_size_(other.name_size_), key_size_(other.key_size_) {
    if (size() > kInlineBytes) {
      heap_ = other.heap_;
      other.name_size_ = other.key_size_ = 0;  // other keeps nothing to free
    } else {
      std::memcpy(inline_, other.inline_, size());
    }
  }
  StoredKey& operator=(StoredKey&& other) noexcept {
    if (this != &other) {
      this->~StoredKey();
      new (this) StoredKey(std::move(other));
    }
    return *this;
  }
  ~StoredKey() {
    if (size() > kInlineBytes) delete[] heap_;
  }

  KeyView view() const {
    const char* data = size() > kInlineBytes ? heap_ : inline_;
    return KeyView{{data, name_size_}, {data + name_size_, key_size_}, hash_};
  }

 private:
  size_t size() const { return name_size_ + key_size_; }
  char* Allocate() { return size() > kInlineBytes ? (heap_ = new char[size()]) : inline_; }

  size_t hash_;
  size_t name_size_;
  size_t key_size_;
  union {
    char inline_[kInlineBytes];
    char* heap_;
  };
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

using EntryMap = internal::LineTable<Record, RecordHash, RecordEq>;

// Cache-line aligned so two shards' locks never share a line. The first line holds what a
// check writes or reads under the lock besides its entry; the table's lookup fields follow
// in a line of their own (LineTable), which a check reads before it locks.
struct alignas(64) Shard {
  absl::Mutex mu;
  // The latest time a check of this shard decided at (microseconds).
  int64_t latest_micros ABSL_GUARDED_BY(mu) = 0;
  // heap.front()'s time, INT64_MAX for an empty heap: what the test before every check reads.
  // Set (NoteSoonest) by every change of the heap: Commit's push, Repush and DropTop.
  int64_t soonest_expiry ABSL_GUARDED_BY(mu) = std::numeric_limits<int64_t>::max();
  // The token bucket durations of the numbers this shard's last token bucket check used, so
  // a check of the same limit needs no division for them (a shard's checks nearly always use
  // the same limit). Always the values TokenBucketTimesFor gives for those numbers, so a
  // decision is the same with or without the cache. 0 capacity: none yet.
  int64_t times_capacity ABSL_GUARDED_BY(mu) = 0;
  double times_refill_per_second ABSL_GUARDED_BY(mu) = 0;
  algorithm::TokenBucketTimes times ABSL_GUARDED_BY(mu);
  EntryMap entries ABSL_GUARDED_BY(mu);
  std::vector<HeapRecord> heap ABSL_GUARDED_BY(mu);
  int64_t capacity = 1;  // set once before the store is shared
};
static_assert(offsetof(Shard, entries) == 64, "the lock's line holds what a check writes");

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

// Where a check by Limit takes the numbers that depend on its limit alone: a token bucket's
// durations from the shard's cache of the last limit's, a sliding window's 1 / window
// computed. (A check through a PreparedLimit takes the prepared ones.)
struct ByLimit {
  ABSL_ATTRIBUTE_ALWAYS_INLINE static const algorithm::TokenBucketTimes& Times(
      Shard& shard, const algorithm::TokenBucketParams& params)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    return TimesFor(shard, params);
  }
  ABSL_ATTRIBUTE_ALWAYS_INLINE static double PerWindow(const algorithm::WindowParams& params) {
    return algorithm::PerWindow(params);
  }
};

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
template <typename S>
ABSL_ATTRIBUTE_ALWAYS_INLINE inline bool NumbersValidAs(const LimitNumbers& n) {
  if constexpr (std::is_same_v<S, TokenBucketState>) {
    return n.capacity >= 1 && n.refill_per_second > 0 && n.refill_per_second < 1e300;
  } else {
    return n.limit >= 1 && n.window_micros >= 1;
  }
}
ABSL_ATTRIBUTE_ALWAYS_INLINE inline bool NumbersValid(const LimitNumbers& n) {
  switch (n.algorithm) {
    case Algorithm::kTokenBucket:
      return NumbersValidAs<TokenBucketState>(n);
    case Algorithm::kFixedWindow:
      return NumbersValidAs<FixedWindowState>(n);
    case Algorithm::kSlidingWindow:
      return NumbersValidAs<SlidingWindowState>(n);
  }
  return false;
}

// Whether Validate() would pass, without building a status.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline bool Valid(const Limit* limit, std::string_view key,
                                               int64_t cost) {
  return limit != nullptr && !key.empty() && cost >= 0 && NumbersValid(limit->numbers);
}

// NumbersValid(limit.numbers), as a status that names the limit.
absl::Status ValidateNumbers(const Limit& limit) {
  if (NumbersValid(limit.numbers)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("limit \"", limit.name, "\" has invalid numbers"));
}

absl::Status Validate(const Limit* limit, std::string_view key, int64_t cost) {
  if (limit == nullptr) return absl::InvalidArgumentError("check item without a limit");
  if (key.empty()) return absl::InvalidArgumentError("empty key");
  if (cost < 0) return absl::InvalidArgumentError("negative cost");
  return ValidateNumbers(*limit);
}

class MemoryStoreImpl final : public MemoryStore {
 public:
  MemoryStoreImpl(Clock* clock, int shards, int64_t max_keys)
      : clock_(clock), shards_(std::make_unique<Shard[]>(shards)), shard_mask_(shards - 1) {
    for (int i = 0; i < shards; ++i) {
      absl::MutexLock lock(&shards_[i].mu);
      shards_[i].capacity = max_keys / shards + (i < max_keys % shards ? 1 : 0);
      shards_[i].entries.set_hash(RecordHash{seed_});
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
      const Limit& limit = *items[0].limit;
      CheckSingle(limit, KeyOf(limit, items[0].key), items[0].cost, decisions[0],
                  [this] { return Now(); });
    } else {
      // One clock read per batch: every item is decided at the same instant.
      CheckMany(items, Now(), decisions);
    }
    std::move(done)(std::move(decisions));
  }

  absl::StatusOr<Decision> CheckOne(const Limit& limit, std::string_view key,
                                    int64_t cost) override {
    switch (limit.numbers.algorithm) {
      case Algorithm::kTokenBucket:
        return CheckOneAs<TokenBucketState>(limit, key, cost);
      case Algorithm::kFixedWindow:
        return CheckOneAs<FixedWindowState>(limit, key, cost);
      case Algorithm::kSlidingWindow:
        return CheckOneAs<SlidingWindowState>(limit, key, cost);
    }
    return Validate(&limit, key, cost);
  }

  absl::StatusOr<PreparedLimit> Prepare(const Limit& limit) const override {
    if (absl::Status status = ValidateNumbers(limit); !status.ok()) return status;
    algorithm::TokenBucketTimes times;
    double per_window = 0;
    if (limit.numbers.algorithm == Algorithm::kTokenBucket) {
      times =
          algorithm::TokenBucketTimesFor({limit.numbers.capacity, limit.numbers.refill_per_second});
    } else if (limit.numbers.algorithm == Algorithm::kSlidingWindow) {
      per_window = algorithm::PerWindow({limit.numbers.limit, limit.numbers.window_micros});
    }
    return MakePrepared(limit, this, NameHash(seed_, limit.name), times.fill_micros,
                        times.unit_micros, times.tokens_per_micro, per_window);
  }

  absl::StatusOr<Decision> CheckOne(const PreparedLimit& limit, std::string_view key,
                                    int64_t cost) override {
    switch (limit.limit().numbers.algorithm) {
      case Algorithm::kTokenBucket:
        return CheckPreparedAs<TokenBucketState>(limit, key, cost);
      case Algorithm::kFixedWindow:
        return CheckPreparedAs<FixedWindowState>(limit, key, cost);
      case Algorithm::kSlidingWindow:
        return CheckPreparedAs<SlidingWindowState>(limit, key, cost);
    }
    return Validate(&limit.limit(), key, cost);
  }

  void CheckEach(absl::Span<const CheckItem> items,
                 absl::Span<absl::StatusOr<Decision>> decisions) override {
    if (ABSL_PREDICT_FALSE(decisions.size() != items.size())) {
      const absl::Status mismatch = absl::InvalidArgumentError(absl::StrCat(
          "CheckEach: ", items.size(), " items but room for ", decisions.size(), " decisions"));
      for (absl::StatusOr<Decision>& decision : decisions) decision = mismatch;
      return;
    }
    // Groups small enough that a group's lines stay cached until used.
    constexpr size_t kGroup = 16;
    KeyView keys[kGroup];
    bool valid[kGroup];
    for (size_t start = 0; start < items.size(); start += kGroup) {
      const size_t count = std::min(items.size() - start, kGroup);
      const CheckItem* group = &items[start];
      for (size_t i = 0; i < count; ++i) {
        valid[i] = Valid(group[i].limit, group[i].key, group[i].cost);
        if (valid[i]) keys[i] = KeyOf(*group[i].limit, group[i].key);
      }
      // Every item's line is on its way before the group's first check, so their misses
      // overlap (docs/design/memory.md, on `MemoryStore::CheckEach`).
      for (size_t i = 0; i < count; ++i) {
        if (valid[i]) PrefetchUnlocked(ShardFor(keys[i].hash), keys[i].hash);
      }
      // One clock read per group: the group's checks arrived together, in one call, and are
      // decided at one instant of it, as an all-or-nothing batch is. Each still decides at
      // the later of this and its shard's latest decision time.
      const int64_t read = Now();
      for (size_t i = 0; i < count; ++i) {
        const CheckItem& item = group[i];
        absl::StatusOr<Decision>& decision = decisions[start + i];
        if (!valid[i]) {
          decision = Validate(item.limit, item.key, item.cost);
          continue;
        }
        decision.emplace();
        CheckSingle(*item.limit, keys[i], item.cost, *decision, [read] { return read; });
      }
    }
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
  // What a check of `key` under `limit` looks up: the two parts where they lie, and their hash.
  ABSL_ATTRIBUTE_ALWAYS_INLINE KeyView KeyOf(const Limit& limit, std::string_view key) const {
    return KeyView{limit.name, key, HashKey(seed_, limit.name, key)};
  }

  Shard& ShardFor(size_t hash) const {
    // The table uses the hash's low bits (the line a probe starts at); the shard takes high
    // bits, so the keys within one shard still spread over the whole hash.
    return shards_[static_cast<int>((hash >> 48) & static_cast<size_t>(shard_mask_))];
  }

  // CheckOne() for a limit of algorithm S. Inlined into CheckOne's switch with the whole
  // single-item path, so a check is one function from its arguments to the decision it
  // returns (docs/design/memory.md, step 4).
  template <typename S>
  ABSL_ATTRIBUTE_ALWAYS_INLINE absl::StatusOr<Decision> CheckOneAs(const Limit& limit,
                                                                   std::string_view key,
                                                                   int64_t cost) {
    if (ABSL_PREDICT_FALSE(key.empty())) return Validate(&limit, key, cost);
    if (ABSL_PREDICT_FALSE(cost < 0)) return Validate(&limit, key, cost);
    if (ABSL_PREDICT_FALSE(!NumbersValidAs<S>(limit.numbers))) return Validate(&limit, key, cost);
    Decision decision;
    CheckSingleAs<S>(
        limit.numbers, KeyOf(limit, key), cost, decision, [this] { return Now(); }, ByLimit());
    return decision;
  }

  // Why CheckOne(prepared, key, cost) cannot decide. Out of line, as every error: the check
  // only branches to it.
  ABSL_ATTRIBUTE_NOINLINE absl::Status InvalidPrepared(const PreparedLimit& prepared,
                                                       std::string_view key, int64_t cost) const {
    if (StoreOf(prepared) != this) {
      return absl::InvalidArgumentError(absl::StrCat(
          "limit \"", prepared.limit().name, "\" was prepared by another store (or not at all)"));
    }
    return Validate(&prepared.limit(), key, cost);
  }

  // ByLimit's numbers, from a PreparedLimit (nested: it reads what the PreparedLimit holds).
  struct FromPrepared {
    const PreparedLimit& prepared;
    ABSL_ATTRIBUTE_ALWAYS_INLINE algorithm::TokenBucketTimes Times(
        Shard& /*shard*/, const algorithm::TokenBucketParams& /*params*/) const {
      return {FillMicrosOf(prepared), UnitMicrosOf(prepared), TokensPerMicroOf(prepared)};
    }
    ABSL_ATTRIBUTE_ALWAYS_INLINE double PerWindow(const algorithm::WindowParams& /*params*/) const {
      return PerWindowOf(prepared);
    }
  };

  // CheckOneAs for a PreparedLimit: the name's hash, the numbers' validity, the token
  // bucket's durations and the sliding window's 1 / window come from it, and it decides as
  // CheckOneAs does for the limit it holds, on the same entries.
  template <typename S>
  ABSL_ATTRIBUTE_ALWAYS_INLINE absl::StatusOr<Decision> CheckPreparedAs(
      const PreparedLimit& prepared, std::string_view key, int64_t cost) {
    const Limit& limit = prepared.limit();
    if (ABSL_PREDICT_FALSE(StoreOf(prepared) != this)) return InvalidPrepared(prepared, key, cost);
    if (ABSL_PREDICT_FALSE(key.empty())) return InvalidPrepared(prepared, key, cost);
    if (ABSL_PREDICT_FALSE(cost < 0)) return InvalidPrepared(prepared, key, cost);
    Decision decision;
    const KeyView key_view{limit.name, key, KeyHash(NameHashOf(prepared), key)};
    CheckSingleAs<S>(
        limit.numbers, key_view, cost, decision, [this] { return Now(); }, FromPrepared{prepared});
    return decision;
  }

  // The fast path of every single-item check: one item, one shard, no temporaries (the key is
  // hashed and compared in its two parts, never composed unless it is new), and the
  // algorithm's state read and written in place. `read_clock()` gives the time to decide at
  // (the clock, or a reading shared by a group of checks). REQUIRES: Valid(&limit, key.key,
  // cost).
  template <typename ReadClock>
  void CheckSingle(const Limit& limit, const KeyView& key, int64_t cost, Decision& out,
                   ReadClock read_clock) {
    switch (limit.numbers.algorithm) {
      case Algorithm::kTokenBucket:
        return CheckSingleAs<TokenBucketState>(limit.numbers, key, cost, out, read_clock,
                                               ByLimit());
      case Algorithm::kFixedWindow:
        return CheckSingleAs<FixedWindowState>(limit.numbers, key, cost, out, read_clock,
                                               ByLimit());
      case Algorithm::kSlidingWindow:
        return CheckSingleAs<SlidingWindowState>(limit.numbers, key, cost, out, read_clock,
                                                 ByLimit());
    }
  }

  // The key's first line is prefetched and the clock read (read_clock()) before the lock is
  // taken, so the line's miss and the read overlap with taking the lock.
  // Decisions in a shard carry times in the order they were made: under the lock, a check
  // decides at the later of its own read and the shard's latest decision, so a thread
  // delayed between reading the clock and taking the lock cannot decide with a time older
  // than a decision already made.
  // `constants`: where the numbers that depend on the limit alone come from (ByLimit or
  // FromPrepared).
  template <typename S, typename ReadClock, typename Constants>
  ABSL_ATTRIBUTE_ALWAYS_INLINE void CheckSingleAs(const LimitNumbers& n, KeyView key, int64_t cost,
                                                  Decision& out, ReadClock read_clock,
                                                  Constants constants) {
    Shard& shard = ShardFor(key.hash);
    PrefetchUnlocked(shard, key.hash);
    const int64_t read = read_clock();
    absl::MutexLock lock(&shard.mu);
    const int64_t now = read > shard.latest_micros ? read : shard.latest_micros;
    shard.latest_micros = now;
    if (ABSL_PREDICT_FALSE(HasExpired(shard, now))) SweepExpired(shard, now, kSweepPerCheck);
    const Record* entry = shard.entries.find(key);
    if constexpr (std::is_same_v<S, TokenBucketState>) {
      const algorithm::TokenBucketParams params{n.capacity, n.refill_per_second};
      // A reference to the shard's cache, or a prepared limit's durations (a temporary).
      const algorithm::TokenBucketTimes& times = constants.Times(shard, params);
      Apply<S>(shard, key, entry, now, out, [&](const auto& state) ABSL_ATTRIBUTE_ALWAYS_INLINE {
        return algorithm::TokenBucketCheck(state, now, params, times, cost);
      });
    } else if constexpr (std::is_same_v<S, FixedWindowState>) {
      Apply<S>(shard, key, entry, now, out, [&](const auto& state) ABSL_ATTRIBUTE_ALWAYS_INLINE {
        return algorithm::FixedWindowCheck(state, now,
                                           algorithm::WindowParams{n.limit, n.window_micros}, cost);
      });
    } else {
      const algorithm::WindowParams params{n.limit, n.window_micros};
      const double per_window = constants.PerWindow(params);
      Apply<S>(shard, key, entry, now, out, [&](const auto& state) ABSL_ATTRIBUTE_ALWAYS_INLINE {
        return algorithm::SlidingWindowCheck(state, now, params, per_window, cost);
      });
    }
  }

  template <typename S, typename AlgorithmStep>
  ABSL_ATTRIBUTE_ALWAYS_INLINE void Apply(Shard& shard, const KeyView& key, const Record* entry,
                                          int64_t now, Decision& out, AlgorithmStep step)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    const bool held = entry != nullptr && entry->Holds<S>();
    algorithm::Outcome<S> outcome =
        step(held ? std::optional<S>(entry->Get<S>()) : std::optional<S>());
    if (outcome.decision.allowed && outcome.changed) {
      if (held) {
        // Its heap record stays; it is pushed again with this time when it comes up.
        entry->Replace(outcome.state);
        entry->set_expires_at_micros(outcome.expires_at_micros);
      } else {
        Commit(shard, key, AnyState(outcome.state), outcome.expires_at_micros, now);
      }
    }
    // Field by field, as the decision was built (docs/design/memory.md, step 4).
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
  // `read`: the clock, read before locking. Like a single-item check, the batch decides at
  // the later of that and the latest decision time of the shards it locks, and that becomes
  // their latest: decisions in a shard keep the order they were made in.
  void CheckMany(const std::vector<CheckItem>& items, int64_t read,
                 std::vector<Decision>& decisions) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    struct Pending {
      KeyView key;
      Shard* shard = nullptr;
      Step step;
    };
    absl::InlinedVector<Pending, 4> pending(items.size());
    absl::InlinedVector<Shard*, 4> locked;
    for (size_t i = 0; i < items.size(); ++i) {
      pending[i].key = KeyOf(*items[i].limit, items[i].key);
      pending[i].shard = &ShardFor(pending[i].key.hash);
      locked.push_back(pending[i].shard);
    }
    // Every item's line is on its way before the first lock: their misses overlap.
    for (const Pending& p : pending) PrefetchUnlocked(*p.shard, p.key.hash);
    // Ascending address order = ascending shard order: every caller locks in the same order,
    // so two batches sharing shards cannot deadlock.
    std::sort(locked.begin(), locked.end());
    locked.erase(std::unique(locked.begin(), locked.end()), locked.end());
    int64_t now = read;
    for (Shard* shard : locked) {
      shard->mu.Lock();
      if (shard->latest_micros > now) now = shard->latest_micros;
    }
    for (Shard* shard : locked) {
      shard->latest_micros = now;
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
      AnyState stored;
      if (state == nullptr) {
        if (const Record* entry = p.shard->entries.find(p.key); entry != nullptr) {
          stored = entry->GetAny();
          state = &stored;
        }
      }
      p.step = Compute(items[i].limit->numbers, state, now, items[i].cost);
      // A refused shadow item does not refuse the batch and is not written (a refusal's
      // state is the state it was decided on).
      if (!p.step.decision.allowed && items[i].shadow) p.step.changed = false;
      all_allowed = all_allowed && (p.step.decision.allowed || items[i].shadow);
      decisions[i] = p.step.decision;
    }

    if (all_allowed) {
      for (Pending& p : pending) {
        if (!p.step.changed) continue;
        Commit(*p.shard, p.key, p.step.state, p.step.expires_at_micros, now);
      }
    } else {
      internal::GiveBackUncharged(items, absl::MakeSpan(decisions));
    }
    for (auto it = locked.rbegin(); it != locked.rend(); ++it) (*it)->mu.Unlock();
  }

  // Stores a consumed state for `key`, in its entry or a new one. Out of line: a check of a
  // key whose entry holds its algorithm's state never calls it.
  ABSL_ATTRIBUTE_NOINLINE void Commit(Shard& shard, const KeyView& key, const AnyState& state,
                                      int64_t expires_at_micros, int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    // Looked up here, not passed in: an earlier commit of the same batch may have inserted
    // into (and rehashed) the table.
    const Record* entry = shard.entries.find(key);
    if (entry != nullptr) {
      // Its heap record stays; it is pushed again with this time when it comes up.
      entry->SetAny(state);
      entry->set_expires_at_micros(expires_at_micros);
      return;
    }
    // A state that already means "missing" (a full bucket) is not worth an entry.
    if (expires_at_micros <= now) return;
    if (static_cast<int64_t>(shard.entries.size()) >= shard.capacity) {
      SweepExpired(shard, now, -1);
      if (static_cast<int64_t>(shard.entries.size()) >= shard.capacity) EvictSoonest(shard);
    }
    shard.heap.push_back(HeapRecord{expires_at_micros, StoredKey(key)});
    std::push_heap(shard.heap.begin(), shard.heap.end(), LaterExpiry());
    NoteSoonest(shard);
    const uint8_t kind = std::visit(
        [](const auto& s) { return StateKindOf<std::decay_t<decltype(s)>>::value; }, state);
    Record* added = shard.entries.insert_new(
        key, [&key, kind](void* line) { new (line) Record(key.name, key.key, kind); });
    added->SetAny(state);
    added->set_expires_at_micros(expires_at_micros);
  }

  // Pops the top heap record. Returns its entry's real expiry and leaves the record popped
  // (at heap.back()) for the caller to drop or push again (DropTop, Repush), which then sets
  // soonest_expiry.
  static std::pair<HeapRecord*, const Record*> PopTop(Shard& shard)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    std::pop_heap(shard.heap.begin(), shard.heap.end(), LaterExpiry());
    HeapRecord& record = shard.heap.back();
    return {&record, shard.entries.find(record.key.view())};
  }

  // Puts the popped record back with its entry's real expiry.
  static void Repush(Shard& shard, int64_t expires_at_micros)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    shard.heap.back().expires_at_micros = expires_at_micros;
    std::push_heap(shard.heap.begin(), shard.heap.end(), LaterExpiry());
    NoteSoonest(shard);
  }

  static void DropTop(Shard& shard) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    HeapRecord& record = shard.heap.back();
    shard.entries.erase(record.key.view());
    shard.heap.pop_back();
    NoteSoonest(shard);
  }

  // Starts loading `key`'s first line without taking the shard's lock (LineTable::prefetch
  // allows it), so CheckEach can have all its items' lines on their way at once.
  static void PrefetchUnlocked(const Shard& shard, size_t hash) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    shard.entries.prefetch(hash);
  }

  // Whether the shard's soonest heap record is due (checked before each check).
  static bool HasExpired(const Shard& shard, int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    return shard.soonest_expiry <= now;
  }

  // Sets soonest_expiry after a change of the heap.
  static void NoteSoonest(Shard& shard) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    shard.soonest_expiry = shard.heap.empty() ? std::numeric_limits<int64_t>::max()
                                              : shard.heap.front().expires_at_micros;
  }

  // Removes entries expired at `now`, at most `budget` heap records handled (-1: no limit).
  // Returns how many entries were removed.
  ABSL_ATTRIBUTE_NOINLINE static int64_t SweepExpired(Shard& shard, int64_t now, int budget)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    int64_t removed = 0;
    while (budget != 0 && !shard.heap.empty() && shard.heap.front().expires_at_micros <= now) {
      if (budget > 0) --budget;
      auto [record, entry] = PopTop(shard);
      if (entry != nullptr && entry->expires_at_micros() > now) {
        Repush(shard, entry->expires_at_micros());
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
      if (entry != nullptr && entry->expires_at_micros() > record->expires_at_micros) {
        Repush(shard, entry->expires_at_micros());  // used since; not as soon as it says
        continue;
      }
      DropTop(shard);
      if (entry == nullptr) continue;  // a record without an entry frees nothing
      evictions_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }

  // The time for a check.
  int64_t Now() const { return clock_->NowMicros(); }

  Clock* const clock_;
  // Seeds HashKey(): differs between stores and processes (address space randomization).
  const uint64_t seed_ = absl::HashOf(reinterpret_cast<uintptr_t>(this));
  const std::unique_ptr<Shard[]> shards_;
  const int shard_mask_;
  std::atomic<int64_t> evictions_{0};
};

}  // namespace

namespace {

class MemoryPreparedCheck final : public PreparedCheck {
 public:
  MemoryPreparedCheck(MemoryStore* store, PreparedLimit prepared)
      : store_(store), prepared_(std::move(prepared)) {}

  absl::StatusOr<Decision> CheckOne(std::string_view key, int64_t cost) override {
    return store_->CheckOne(prepared_, key, cost);
  }

 private:
  MemoryStore* const store_;
  const PreparedLimit prepared_;
};

}  // namespace

std::unique_ptr<PreparedCheck> MemoryStore::PrepareCheck(const Limit& limit) {
  absl::StatusOr<PreparedLimit> prepared = Prepare(limit);
  if (!prepared.ok()) return nullptr;
  return std::make_unique<MemoryPreparedCheck>(this, *std::move(prepared));
}

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
