// Copyright tollgate authors.
#include "src/core/bytes_hash.h"

#include <cstdint>
#include <cstring>
#include <string>

#include "gtest/gtest.h"

namespace tollgate::internal {
namespace {

// Every length from empty to past two 16-byte blocks, a difference at every position.
constexpr size_t kMaxLength = 40;

std::string Text(size_t length) {
  std::string text;
  for (size_t i = 0; i < length; ++i) text.push_back(static_cast<char>('a' + i % 26));
  return text;
}

TEST(BytesEqualTest, AgreesWithMemcmpForEveryLengthAndEveryDifferingByte) {
  for (size_t length = 0; length <= kMaxLength; ++length) {
    const std::string a = Text(length);
    std::string b = a;
    ASSERT_TRUE(BytesEqual(a.data(), b.data(), length)) << length;
    for (size_t at = 0; at < length; ++at) {
      b[at] ^= 0x20;
      ASSERT_FALSE(BytesEqual(a.data(), b.data(), length)) << length << " at " << at;
      ASSERT_NE(std::memcmp(a.data(), b.data(), length), 0);
      b[at] ^= 0x20;
    }
  }
}

TEST(HashBytesTest, EveryByteAndTheLengthChangeTheHash) {
  constexpr uint64_t kSeed = 0x1234'5678'9abc'def0;
  for (size_t length = 0; length <= kMaxLength; ++length) {
    std::string text = Text(length);
    const uint64_t hash = HashBytes(kSeed, text);
    EXPECT_EQ(HashBytes(kSeed, text), hash) << "deterministic";
    EXPECT_NE(HashBytes(kSeed + 1, text), hash) << "seeded, length " << length;
    for (size_t at = 0; at < length; ++at) {
      text[at] ^= 0x01;
      EXPECT_NE(HashBytes(kSeed, text), hash) << "length " << length << " at " << at;
      text[at] ^= 0x01;
    }
    // Zero bytes too: a string of zeros differs from a shorter one only in its length.
    EXPECT_NE(HashBytes(kSeed, std::string(length, '\0')),
              HashBytes(kSeed, std::string(length + 1, '\0')))
        << length;
  }
}

}  // namespace
}  // namespace tollgate::internal
