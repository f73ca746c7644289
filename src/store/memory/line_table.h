// Copyright tollgate authors. The memory store's hash table: one entry per 64-byte line,
// found by linear probing from the line its hash names.
//
// Why not absl::flat_hash_set: its control bytes (one per slot) live apart from the slots,
// and which slot of a probe group holds a key is known only once its control bytes are
// read. In a table larger than the caches, a lookup therefore waits for two cache misses,
// one after the other (the control bytes' line, then the entry's). Here the probe starts at
// the entry's own line, so a lookup usually waits for one miss, and a prefetch of that line,
// issued before the hash is needed for anything else, is the right line. The price: a probe
// compares each line it passes (Eq), and the table keeps its load at most 70% so probe runs
// stay short.
//
// Kept by the 2x rule (a home-made part stays only where a row a user would notice is at least
// 2x better with it): with an absl::flat_hash_set of the same entries behind this interface,
// the 1M-key fixed-window store rows ran at 0.40-0.43x (CheckOne) and 0.31-0.36x (CheckEach)
// of this table's speed (BENCHMARKS.md, "Home-made parts against the libraries").
//
// Deletion shifts the entries after the deleted one back (no tombstones), so a lookup never
// passes more lines than the run it is in. Growing and shrinking rehash every entry; the
// table shrinks when it is less than an eighth full, so its memory follows the live entries.
//
// T: a 64-byte, 64-byte-aligned type whose all-zero bytes mean "no entry" (T::Vacant tells
// a line apart), move-constructible (the table moves an entry by constructing it in its new
// line and destroying the old one). Hash(t) gives an entry's hash; a lookup key K carries
// its hash in `key.hash`; Eq(t, key) compares.
// Not thread-safe: the caller locks.
#ifndef TOLLGATE_SRC_STORE_MEMORY_LINE_TABLE_H_
#define TOLLGATE_SRC_STORE_MEMORY_LINE_TABLE_H_

#include <sys/mman.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"

namespace tollgate::memory {

template <typename T, typename Hash, typename Eq>
class LineTable {
  static_assert(sizeof(T) == 64 && alignof(T) == 64, "one entry, one cache line");

 public:
  explicit LineTable(Hash hash = Hash(), Eq eq = Eq()) : hash_(hash), eq_(eq) {}
  LineTable(const LineTable&) = delete;
  LineTable& operator=(const LineTable&) = delete;
  ~LineTable() {
    for (size_t i = 0; i < capacity_; ++i) {
      if (!T::Vacant(lines_[i])) lines_[i].~T();
    }
    std::free(lines_);
  }

  // Replaces the hash function. REQUIRES: the table is empty.
  void set_hash(Hash hash) { hash_ = hash; }

  size_t size() const { return size_; }
  // Lines allocated (a power of two, or 0).
  size_t capacity() const { return capacity_; }

  // Starts loading the line a lookup of a key with this hash begins at, and the next (where
  // an entry pushed from its line usually is). The one member that may be called without
  // the caller's lock (to prefetch for several keys before locking anything): it reads the
  // table's address and mask atomically, and a stale pair (the table was moved meanwhile)
  // only prefetches useless lines; a prefetch never faults.
  ABSL_ATTRIBUTE_ALWAYS_INLINE void prefetch(size_t hash) const {
    const T* lines = std::atomic_ref<T*>(const_cast<T*&>(lines_)).load(std::memory_order_relaxed);
    const size_t mask =
        std::atomic_ref<size_t>(const_cast<size_t&>(mask_)).load(std::memory_order_relaxed);
    if (ABSL_PREDICT_TRUE(lines != nullptr)) {
      __builtin_prefetch(lines + (hash & mask), 1);
      __builtin_prefetch(lines + ((hash + 1) & mask), 1);
    }
  }

  // The entry equal to `key`, or nullptr. Valid until the next insert or erase.
  template <typename K>
  ABSL_ATTRIBUTE_ALWAYS_INLINE T* find(const K& key) const {
    if (ABSL_PREDICT_FALSE(capacity_ == 0)) return nullptr;
    for (size_t i = key.hash & mask_;; i = (i + 1) & mask_) {
      T& line = lines_[i];
      if (eq_(line, key)) return &line;
      if (T::Vacant(line)) return nullptr;  // Eq never matches a vacant line
    }
  }

  // Adds an entry for `key`, which must not be in the table: construct(void* line) places a
  // T there (with placement new). Returns it; valid until the next insert or erase.
  template <typename K, typename Construct>
  T* insert_new(const K& key, Construct construct) {
    if ((size_ + 1) * 10 > capacity_ * 7) Rehash(capacity_ == 0 ? kMinCapacity : capacity_ * 2);
    size_t i = key.hash & mask_;
    while (!T::Vacant(lines_[i])) i = (i + 1) & mask_;
    construct(static_cast<void*>(&lines_[i]));
    ++size_;
    return &lines_[i];
  }

  // Removes the entry equal to `key`. Returns whether there was one.
  template <typename K>
  bool erase(const K& key) {
    T* entry = find(key);
    if (entry == nullptr) return false;
    entry->~T();
    size_t hole = static_cast<size_t>(entry - lines_);
    // Shift back every later entry of the run that may move into the hole: one whose home
    // line is not cyclically within (hole, j].
    for (size_t j = (hole + 1) & mask_; !T::Vacant(lines_[j]); j = (j + 1) & mask_) {
      const size_t home = hash_(lines_[j]) & mask_;
      const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
      if (stays) continue;
      Move(&lines_[j], &lines_[hole]);
      hole = j;
    }
    std::memset(static_cast<void*>(&lines_[hole]), 0, sizeof(T));  // vacant
    --size_;
    if (capacity_ > kMinCapacity && size_ * 8 < capacity_) Rehash(capacity_ / 2);
    return true;
  }

 private:
  static constexpr size_t kMinCapacity = 16;
  static constexpr size_t kHugePage = size_t{2} << 20;

  // Moves every entry into a table of `capacity` lines (a power of two that holds them).
  void Rehash(size_t capacity) {
    T* old_lines = lines_;
    const size_t old_capacity = capacity_;
    // Atomic stores, for prefetch() in other threads (every other access holds the lock).
    std::atomic_ref<T*>(lines_).store(Allocate(capacity), std::memory_order_relaxed);
    std::atomic_ref<size_t>(mask_).store(capacity - 1, std::memory_order_relaxed);
    capacity_ = capacity;
    for (size_t i = 0; i < old_capacity; ++i) {
      if (T::Vacant(old_lines[i])) continue;
      size_t j = hash_(old_lines[i]) & mask_;
      while (!T::Vacant(lines_[j])) j = (j + 1) & mask_;
      Move(&old_lines[i], &lines_[j]);
    }
    std::free(old_lines);  // Allocate's aligned_alloc
  }

  // Moves an entry into a vacant line; `from` is left destroyed (not yet vacant).
  static void Move(T* from, T* to) {
    new (to) T(std::move(*from));
    std::destroy_at(from);
  }

  static size_t Bytes(size_t capacity) {
    const size_t bytes = capacity * sizeof(T);
    return bytes < kHugePage ? bytes : (bytes + kHugePage - 1) / kHugePage * kHugePage;
  }

  // Zeroed lines. A table of 2 MiB or more asks for transparent huge pages, which the kernel
  // gives only on request in its default "madvise" mode: with 4 KiB pages a lookup in a
  // large table misses the TLB on nearly every check, and the page walk is one more miss.
  static T* Allocate(size_t capacity) {
    const size_t bytes = Bytes(capacity);
    void* memory = std::aligned_alloc(bytes < kHugePage ? 64 : kHugePage, bytes);
    if (memory == nullptr) throw std::bad_alloc();                  // as std::allocator does
    if (bytes >= kHugePage) madvise(memory, bytes, MADV_HUGEPAGE);  // a hint
    std::memset(memory, 0, bytes);
    return static_cast<T*>(memory);
  }

  // What a lookup reads, in a cache line of its own that only a rehash writes: every core
  // that looks up keeps a shared copy. (prefetch() needs lines_ and mask_ before it can
  // start loading anything; in a line another core writes, such as the one holding the
  // caller's lock, it would first wait for that line to come over.)
  alignas(64) T* lines_ = nullptr;
  size_t mask_ = 0;
  size_t capacity_ = 0;
  Hash hash_;
  Eq eq_;
  // Written by every insert and erase.
  alignas(64) size_t size_ = 0;
};

}  // namespace tollgate::memory

#endif  // TOLLGATE_SRC_STORE_MEMORY_LINE_TABLE_H_
