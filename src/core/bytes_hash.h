// Copyright tollgate authors. A fast hash and equality for the short strings of a check.
//
// Every check hashes a limit name and a key (the limiter's name lookup, the memory store's
// entry lookup); this hash is inline and cheaper than absl::Hash for short strings
// (docs/memory.md, "Hashing and memory"). Not for data an attacker can see the hashes of;
// the seed is what keeps colliding keys from being chosen.
#ifndef TOLLGATE_SRC_CORE_BYTES_HASH_H_
#define TOLLGATE_SRC_CORE_BYTES_HASH_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "absl/base/attributes.h"

namespace tollgate::internal {

ABSL_ATTRIBUTE_ALWAYS_INLINE inline uint64_t Load64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline uint64_t Load32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// The high and low halves of a 64 x 64 -> 128-bit product, folded together: every input
// bit reaches every output bit.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline uint64_t Fold(uint64_t a, uint64_t b) {
#if defined(__x86_64__) && defined(__GNUC__)
  // The same product, computed by one `mul` with both halves left in registers.
  uint64_t low;
  uint64_t high;
  asm("mulq %3" : "=a"(low), "=d"(high) : "a"(a), "rm"(b) : "cc");
  return low ^ high;
#else
  const unsigned __int128 product = static_cast<unsigned __int128>(a) * b;
  return static_cast<uint64_t>(product) ^ static_cast<uint64_t>(product >> 64);
#endif
}

// Hashes `bytes` into `state` (start from a seed): one multiplication per 16 bytes. The
// state enters both factors of every multiplication, so colliding keys cannot be chosen
// without knowing the seed. A string longer than 16 bytes ends with its last 16 bytes,
// read whole (overlapping the block before), not assembled from its tail.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline uint64_t HashBytes(uint64_t state, std::string_view bytes) {
  constexpr uint64_t kOdd0 = 0x9e3779b97f4a7c15;  // 2^64 / golden ratio
  constexpr uint64_t kOdd1 = 0xc2b2ae3d27d4eb4f;
  const char* p = bytes.data();
  const size_t n = bytes.size();
  state ^= n * kOdd0;
  uint64_t a = 0;
  uint64_t b = 0;
  if (n > 16) {
    const char* last = p + n - 16;
    // The first block outside the loop: a name or key of 17 to 32 bytes needs no loop.
    state = Fold(Load64(p) ^ kOdd0 ^ state, Load64(p + 8) ^ kOdd1 ^ state);
    for (p += 16; p < last; p += 16) {
      state = Fold(Load64(p) ^ kOdd0 ^ state, Load64(p + 8) ^ kOdd1 ^ state);
    }
    a = Load64(last);
    b = Load64(last + 8);
  } else if (n >= 8) {  // two 8-byte reads, overlapping when n < 16
    a = Load64(p);
    b = Load64(p + n - 8);
  } else if (n >= 4) {
    a = Load32(p);
    b = Load32(p + n - 4);
  } else if (n > 0) {
    a = (uint64_t{static_cast<uint8_t>(p[0])} << 16) |
        (uint64_t{static_cast<uint8_t>(p[n / 2])} << 8) | static_cast<uint8_t>(p[n - 1]);
  }
  return Fold(a ^ kOdd0 ^ state, b ^ kOdd1 ^ state);
}

// The bits in which the 8 bytes at a + i and b + i differ.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline uint64_t Diff64(const char* a, const char* b, size_t i) {
  return Load64(a + i) ^ Load64(b + i);
}

// Equality of short byte strings without a call to memcmp. Up to 32 bytes without a loop or
// a branch per word: the first and last 8 (or 16) bytes, overlapping in the middle.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline bool BytesEqual(const char* a, const char* b, size_t n) {
  if (n >= 8) {
    if (n <= 16) return (Diff64(a, b, 0) | Diff64(a, b, n - 8)) == 0;
    if (n <= 32) {
      return (Diff64(a, b, 0) | Diff64(a, b, 8) | Diff64(a, b, n - 16) | Diff64(a, b, n - 8)) == 0;
    }
    for (size_t i = 0; i + 8 < n; i += 8) {
      if (Diff64(a, b, i) != 0) return false;
    }
    return Diff64(a, b, n - 8) == 0;
  }
  if (n >= 4) return ((Load32(a) ^ Load32(b)) | (Load32(a + n - 4) ^ Load32(b + n - 4))) == 0;
  if (n == 0) return true;
  // Bytes 0, n / 2 and n - 1 are every byte of a string of 1 to 3 bytes.
  return a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1];
}

}  // namespace tollgate::internal

#endif  // TOLLGATE_SRC_CORE_BYTES_HASH_H_
