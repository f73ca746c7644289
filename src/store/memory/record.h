// Copyright tollgate authors. One entry of the memory store: a (limit name, key), the state its
// algorithm keeps for it, and when that state stops mattering.
//
// A Record is one 64-byte line of a shard's LineTable: the expiry, the state, and the name and
// key themselves when together they take at most kInlineBytes (so a lookup reads this one
// line), else a pointer to a copy of them on the heap. All-zero bytes are a vacant line
// (LineTable's contract).
//
// Not thread-safe: the shard that holds a record locks around every use.
#ifndef TOLLGATE_SRC_STORE_MEMORY_RECORD_H_
#define TOLLGATE_SRC_STORE_MEMORY_RECORD_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/hash/hash.h"
#include "src/store/memory/limit_rule.h"

namespace tollgate::memory {

// A limit name and a key owned by someone else, with their hash: what a lookup compares.
struct KeyView {
  std::string_view name;
  std::string_view key;
  size_t hash = 0;

  // The hash is compared first; equal hashes are then compared byte by byte.
  bool operator==(const KeyView& other) const {
    return hash == other.hash && name == other.name && key == other.key;
  }
};

// The hash of a limit name under a store's seed, and of a key under that:
// KeyHash(NameHash(seed, name), key) is an entry's hash, so a check that hashed the name once
// (a prepared limit) finds the entries a check that hashes both made.
inline uint64_t NameHash(uint64_t seed, std::string_view name) { return absl::HashOf(seed, name); }
inline size_t KeyHash(uint64_t name_hash, std::string_view key) {
  return absl::HashOf(name_hash, key);
}

class alignas(64) Record {
 public:
  // The most name and key bytes, together, kept in the line itself.
  static constexpr size_t kInlineBytes = 29;

  // An entry for `key` (its bytes copied) holding `state` until `expires_at_micros`.
  Record(const KeyView& key, const AnyState& state, int64_t expires_at_micros);
  // Takes `other`'s key, state and expiry; `other` is left owning nothing.
  Record(Record&& other) noexcept;
  Record(const Record&) = delete;
  Record& operator=(const Record&) = delete;
  Record& operator=(Record&&) = delete;
  ~Record();

  // Whether `line` holds no entry: every constructed record holds a state.
  static bool Vacant(const Record& line) { return line.state_index_ == 0; }

  // Whether this entry is `key`'s (the hash is not compared). False for a vacant line.
  bool Is(const KeyView& key) const {
    return state_index_ != 0 && name() == key.name && this->key() == key.key;
  }
  std::string_view name() const {
    if (name_size_ != kOnHeap) return {bytes_, name_size_};
    const OnHeap heap = on_heap();
    return {heap.bytes, heap.name_size};
  }
  std::string_view key() const {
    if (name_size_ != kOnHeap) return {bytes_ + name_size_, key_size_};
    const OnHeap heap = on_heap();
    return {heap.bytes + heap.name_size, heap.key_size};
  }

  // The state, if it is one of type S (an AnyState alternative).
  template <typename S>
  std::optional<S> Get() const {
    if (state_index_ != kStateIndex<S> + 1) return std::nullopt;
    S state;
    std::memcpy(&state, state_, sizeof(S));
    return state;
  }
  // Replaces the state (of any algorithm) with `state`.
  template <typename S>
  void Set(const S& state) {
    static_assert(std::is_trivially_copyable_v<S> && sizeof(S) <= sizeof(state_));
    std::memcpy(state_, &state, sizeof(S));
    state_index_ = static_cast<uint8_t>(kStateIndex<S> + 1);
  }
  // The same for a state of any type.
  AnyState state() const;
  void set_state(const AnyState& state);

  // When the state stops mattering (a missing entry means the same from then on), in
  // microseconds since the epoch. The shard's expiry heap may hold an earlier time for this
  // entry; this one is the truth.
  int64_t expires_at_micros;

 private:
  // name_size_ of a name and key kept on the heap; bytes_ then holds an OnHeap.
  static constexpr uint8_t kOnHeap = 0xff;
  struct OnHeap {
    char* bytes;  // owned: the name, then the key
    size_t name_size;
    size_t key_size;
  };
  static_assert(sizeof(OnHeap) <= kInlineBytes);

  // Sets `state` to this record's state if it is of type S.
  template <typename S>
  void TakeIfHeld(AnyState& state) const {
    if (const std::optional<S> held = Get<S>(); held.has_value()) state = *held;
  }

  OnHeap on_heap() const {
    OnHeap heap;
    std::memcpy(&heap, bytes_, sizeof(heap));
    return heap;
  }

  // The bytes of the alternative state_index_ - 1 of AnyState (every one is trivially
  // copyable and fits).
  unsigned char state_[24];
  uint8_t state_index_;  // 0 only in a vacant line
  uint8_t name_size_;
  uint8_t key_size_;
  char bytes_[kInlineBytes];  // the name, then the key; or an OnHeap
};
static_assert(sizeof(Record) == 64, "one entry, one cache line");

// LineTable's hash and equality for records, looked up by KeyView. Stateful: the hash holds
// the store's seed.
struct RecordHash {
  uint64_t seed = 0;
  size_t operator()(const Record& record) const {
    return KeyHash(NameHash(seed, record.name()), record.key());
  }
};
struct RecordEq {
  bool operator()(const Record& record, const KeyView& key) const { return record.Is(key); }
};

// A copy of an entry's name and key, with their hash (for the shard's expiry heap).
class KeyCopy {
 public:
  explicit KeyCopy(const KeyView& key);
  KeyView view() const {
    const std::string_view all = bytes_;
    return KeyView{all.substr(0, name_size_), all.substr(name_size_), hash_};
  }

 private:
  std::string bytes_;  // the name, then the key
  size_t name_size_;
  size_t hash_;
};

}  // namespace tollgate::memory

#endif  // TOLLGATE_SRC_STORE_MEMORY_RECORD_H_
