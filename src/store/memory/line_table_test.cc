// Copyright tollgate authors.
#include "src/store/memory/line_table.h"

#include <cstdint>
#include <new>
#include <random>
#include <unordered_set>
#include <vector>

#include "gtest/gtest.h"

namespace tollgate::memory {
namespace {

// An entry: a nonzero key and a count of live entries, so a test sees every entry the table
// constructs or moves destroyed exactly once.
int live_entries = 0;

struct alignas(64) TestLine {
  explicit TestLine(uint64_t k) : key(k) { ++live_entries; }
  TestLine(TestLine&& other) noexcept : key(other.key), payload(other.payload) { ++live_entries; }
  ~TestLine() { --live_entries; }
  TestLine(const TestLine&) = delete;
  TestLine& operator=(const TestLine&) = delete;
  static bool Vacant(const TestLine& line) { return line.key == 0; }

  uint64_t key;
  uint64_t payload = 0;
  char pad[48] = {};
};

struct Lookup {
  uint64_t key;
  size_t hash;
};

// Hashes with few distinct values (buckets of `spread` keys), so runs grow long, collide
// with each other and wrap around the table's end: the cases deletion must shift right.
struct WeakHash {
  uint64_t spread = 1;
  size_t operator()(const TestLine& line) const { return Of(line.key); }
  size_t Of(uint64_t key) const { return static_cast<size_t>(key / spread * 0x9e3779b97f4a7c15); }
};

struct KeyEq {
  bool operator()(const TestLine& line, const Lookup& lookup) const {
    return line.key == lookup.key;
  }
};

using Table = LineTable<TestLine, WeakHash, KeyEq>;

Lookup At(const WeakHash& hash, uint64_t key) { return Lookup{key, hash.Of(key)}; }

TestLine* Insert(Table& table, const WeakHash& hash, uint64_t key) {
  return table.insert_new(Lookup{key, hash.Of(key)},
                          [key](void* line) { new (line) TestLine(key); });
}

// Random inserts and erases against std::unordered_set, for several hash spreads: after
// every step the sizes agree, and every so often every key in [1, kKeys] is found exactly
// when the reference holds it, with the payload it was last given.
TEST(LineTableTest, RandomInsertsAndErasesMatchAReferenceSet) {
  constexpr uint64_t kKeys = 3'000;
  for (const uint64_t spread : {uint64_t{1}, uint64_t{8}, uint64_t{64}}) {
    SCOPED_TRACE(spread);
    const WeakHash hash{spread};
    std::unordered_set<uint64_t> reference;
    {
      Table table(hash);
      std::mt19937_64 random(spread);
      for (int step = 0; step < 60'000; ++step) {
        const uint64_t key = random() % kKeys + 1;
        // Mostly inserts early, mostly erases late: the table grows, then shrinks.
        const bool insert = static_cast<int>(random() % 60'000) > step;
        const Lookup lookup = At(hash, key);
        TestLine* found = table.find(lookup);
        ASSERT_EQ(found != nullptr, reference.count(key) == 1) << "step " << step;
        if (insert && found == nullptr) {
          Insert(table, hash, key)->payload = key * 3;
          reference.insert(key);
        } else if (!insert && found != nullptr) {
          ASSERT_TRUE(table.erase(lookup));
          reference.erase(key);
        }
        ASSERT_EQ(table.size(), reference.size());
        if (step % 2'000 == 0) {
          for (uint64_t k = 1; k <= kKeys; ++k) {
            TestLine* line = table.find(At(hash, k));
            ASSERT_EQ(line != nullptr, reference.count(k) == 1) << "key " << k;
            if (line != nullptr) {
              ASSERT_EQ(line->payload, k * 3);
            }
          }
        }
      }
      EXPECT_EQ(live_entries, static_cast<int>(reference.size()));
    }
    EXPECT_EQ(live_entries, 0) << "the table destroys what it holds";
  }
}

TEST(LineTableTest, KeepsItsLoadAtMostSeventyPercentAndShrinksAsEntriesLeave) {
  const WeakHash hash{1};
  Table table(hash);
  EXPECT_EQ(table.capacity(), 0u);
  EXPECT_EQ(table.find(At(hash, 1)), nullptr);
  for (uint64_t key = 1; key <= 10'000; ++key) {
    Insert(table, hash, key);
    ASSERT_LE(table.size() * 10, table.capacity() * 7);
  }
  const size_t full_capacity = table.capacity();
  for (uint64_t key = 1; key <= 9'990; ++key) ASSERT_TRUE(table.erase(At(hash, key)));
  EXPECT_EQ(table.size(), 10u);
  EXPECT_LE(table.capacity() * 64, full_capacity) << "memory follows the live entries";
  for (uint64_t key = 9'991; key <= 10'000; ++key) {
    ASSERT_NE(table.find(At(hash, key)), nullptr);
  }
  EXPECT_FALSE(table.erase(At(hash, 1))) << "already gone";
}

}  // namespace
}  // namespace tollgate::memory
