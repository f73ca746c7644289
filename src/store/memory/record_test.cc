// Copyright tollgate authors.
#include "src/store/memory/record.h"

#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <utility>
#include <variant>

#include "gtest/gtest.h"

namespace tollgate::memory {
namespace {

constexpr uint64_t kSeed = 7;

KeyView View(std::string_view name, std::string_view key) {
  return KeyView{name, key, KeyHash(NameHash(kSeed, name), key)};
}

// Name and key sizes on both sides of the inline limit, and keys holding any byte.
TEST(RecordTest, KeepsItsNameAndKeyInlineOrOnTheHeap) {
  for (size_t total = 1; total <= Record::kInlineBytes + 3; ++total) {
    for (size_t name_size : {size_t{0}, total / 2, total - 1}) {
      const std::string name(name_size, 'n');
      std::string key(total - name_size, 'k');
      key[key.size() / 2] = '\0';
      const Record record(View(name, key), algorithm::TokenBucketState{1.5}, 42);
      EXPECT_EQ(record.name(), name) << total;
      EXPECT_EQ(record.key(), key) << total;
      EXPECT_TRUE(record.Is(View(name, key))) << total;
      EXPECT_EQ(RecordHash{kSeed}(record), View(name, key).hash);
      EXPECT_FALSE(Record::Vacant(record));
      EXPECT_EQ(record.expires_at_micros, 42);
    }
  }
}

TEST(RecordTest, WhereTheNameEndsIsPartOfTheKey) {
  for (const std::string& tail : {std::string(), std::string(Record::kInlineBytes, 'z')}) {
    const Record record(View("ab", "c" + tail), algorithm::TokenBucketState{}, 1);
    EXPECT_TRUE(record.Is(View("ab", "c" + tail)));
    EXPECT_FALSE(record.Is(View("a", "bc" + tail)));
    EXPECT_FALSE(record.Is(View("ab", "c" + tail + "d")));
  }
}

TEST(RecordTest, AnAllZeroLineIsVacantAndMatchesNoKey) {
  alignas(Record) unsigned char line[sizeof(Record)] = {};
  const Record& vacant = *std::launder(reinterpret_cast<const Record*>(line));
  EXPECT_TRUE(Record::Vacant(vacant));
  EXPECT_FALSE(vacant.Is(View("", "")));
}

// Each algorithm's state comes back as it was set, whatever was there before, and the key
// stays.
TEST(RecordTest, KeepsAStateOfEveryAlgorithm) {
  const AnyState states[] = {algorithm::TokenBucketState{-12.25},
                             algorithm::FixedWindowState{-3, 9},
                             algorithm::SlidingWindowState{1'700'000, 4, 11}};
  for (const std::string& key : {std::string("short"), std::string(40, 'x')}) {
    Record record(View("limit", key), states[0], 1);
    for (const AnyState& state : {states[2], states[0], states[1], states[2], states[1]}) {
      record.set_state(state);
      EXPECT_EQ(record.state(), state);
      EXPECT_EQ(record.key(), key);
    }
  }
}

// A move (what the table does when it grows or shifts entries) keeps everything, and leaves
// the source owning nothing: each heap copy is freed once (ASan would see a second free).
TEST(RecordTest, AMoveTakesTheKeyStateAndExpiry) {
  for (const std::string& key : {std::string("short"), std::string(100, 'y')}) {
    alignas(Record) unsigned char from_line[sizeof(Record)];
    alignas(Record) unsigned char to_line[sizeof(Record)];
    auto* from = new (from_line) Record(View("limit", key), algorithm::FixedWindowState{5, 6}, 77);
    auto* to = new (to_line) Record(std::move(*from));
    from->~Record();
    EXPECT_TRUE(to->Is(View("limit", key)));
    EXPECT_EQ(to->state(), AnyState(algorithm::FixedWindowState{5, 6}));
    EXPECT_EQ(to->expires_at_micros, 77);
    to->~Record();
  }
}

TEST(RecordTest, AKeyCopyViewsItsOwnBytes) {
  const std::string long_key(50, 'k');
  std::string name = "limit";
  std::string key = long_key;
  const KeyCopy copy(View(name, key));
  name.assign("other");
  key.assign("other");
  EXPECT_EQ(copy.view(), View("limit", long_key));
}

}  // namespace
}  // namespace tollgate::memory
