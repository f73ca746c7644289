// Copyright tollgate authors.
#include "src/store/memory/shard.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace tollgate::memory {
namespace {

constexpr uint64_t kSeed = 11;

// A shard with its lock held for the whole test (the tests are single-threaded).
class ShardTest : public ::testing::Test {
 protected:
  void SetUp() override ABSL_NO_THREAD_SAFETY_ANALYSIS {
    shard_.mu().Lock();
    shard_.Init(kSeed, 4);
  }
  void TearDown() override ABSL_NO_THREAD_SAFETY_ANALYSIS { shard_.mu().Unlock(); }

  // Keys kept as strings so views of them stay valid.
  KeyView Key(const std::string& key) {
    return KeyView{"limit", key, KeyHash(NameHash(kSeed, "limit"), key)};
  }
  // Puts a token bucket state tagged with `tag` for `key`, expiring at `expires_at`.
  void Put(const std::string& key, double tag, int64_t expires_at,
           int64_t now = 0) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    shard_.Put(Key(key), algorithm::TokenBucketState{tag}, expires_at, now);
  }
  // The tag of `key`'s state, or -1 without an entry.
  double Tag(const std::string& key) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const Record* entry = shard_.Find(Key(key));
    if (entry == nullptr) return -1;
    return std::get<algorithm::TokenBucketState>(entry->state()).empty_at_micros;
  }
  int64_t Size() ABSL_NO_THREAD_SAFETY_ANALYSIS { return shard_.size(); }
  int64_t Evictions() ABSL_NO_THREAD_SAFETY_ANALYSIS { return shard_.evictions(); }

  Shard shard_;
};

TEST_F(ShardTest, PutKeepsAStateInTheKeysOwnEntry) {
  Put("a", 1, 100);
  Put("b", 2, 100);
  Put("a", 3, 200);
  EXPECT_EQ(Tag("a"), 3);
  EXPECT_EQ(Tag("b"), 2);
  EXPECT_EQ(Tag("c"), -1);
  EXPECT_EQ(Size(), 2);
}

// A state already expired means what no entry means: a new key gets no entry for it, while a
// key with an entry keeps it updated. An expiry moved earlier (a limit redefined) takes effect
// at the entry's heap record's time.
TEST_F(ShardTest, AnExpiredStateMakesNoNewEntry) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  Put("new", 1, 50, /*now=*/50);
  EXPECT_EQ(Tag("new"), -1);
  Put("old", 1, 100, 0);
  Put("old", 2, 50, /*now=*/50);
  EXPECT_EQ(Tag("old"), 2);
  EXPECT_EQ(shard_.Sweep(99), 0);
  EXPECT_EQ(shard_.Sweep(100), 1);
  EXPECT_EQ(Size(), 0);
}

// An entry whose expiry moved later than its heap record's time survives the sweep at the
// old time, and goes at its own.
TEST_F(ShardTest, ASweepGoesByEachEntrysOwnExpiry) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  Put("moved", 1, 100);
  Put("stays", 1, 150);
  Put("moved", 2, 300);
  EXPECT_EQ(shard_.Sweep(200), 1);
  EXPECT_EQ(Tag("moved"), 2);
  EXPECT_EQ(Tag("stays"), -1);
  EXPECT_EQ(shard_.Sweep(299), 0);
  EXPECT_EQ(shard_.Sweep(300), 1);
  EXPECT_EQ(Size(), 0);
}

TEST_F(ShardTest, DecisionsRemoveAFewExpiredEntriesAndKeepTheirTime)
ABSL_NO_THREAD_SAFETY_ANALYSIS {
  shard_.Init(kSeed, 100);
  std::vector<std::string> keys;
  for (int i = 0; i < 10; ++i) keys.push_back(absl::StrCat("k", i));
  for (const std::string& key : keys) Put(key, 1, 100);
  shard_.StartDecisionsAt(50);
  EXPECT_EQ(shard_.latest_micros(), 50);
  EXPECT_EQ(Size(), 10);
  shard_.StartDecisionsAt(100);
  EXPECT_EQ(Size(), 10 - Shard::kSweepPerDecision);
  shard_.StartDecisionsAt(100);
  shard_.StartDecisionsAt(100);
  EXPECT_EQ(Size(), 0);
  EXPECT_EQ(shard_.latest_micros(), 100);
}

// At capacity a new key first removes expired entries; with none, it evicts the entry whose
// own expiry is soonest, even when another entry's heap record is older.
TEST_F(ShardTest, AtCapacityTheSoonestToExpireGoes) {
  Put("a", 1, 100);  // its record says 100...
  Put("b", 1, 200);
  Put("c", 1, 300);
  Put("d", 1, 400);
  Put("a", 2, 500);  // ...but it now lives until 500
  Put("e", 1, 600, /*now=*/10);
  EXPECT_EQ(Size(), 4);
  EXPECT_EQ(Evictions(), 1);
  EXPECT_EQ(Tag("b"), -1);
  EXPECT_EQ(Tag("a"), 2);
  EXPECT_EQ(Tag("e"), 1);

  Put("f", 1, 700, /*now=*/350);  // c expired by now: removed, not evicted
  EXPECT_EQ(Evictions(), 1);
  EXPECT_EQ(Tag("c"), -1);
  EXPECT_EQ(Size(), 4);
}

// Keys long enough to live on the heap, through growth of the table and erasure in expiry
// order: each keeps its own state, and every copy is freed once (ASan).
TEST_F(ShardTest, ManyLongKeysComeAndGo) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  shard_.Init(kSeed, 1000);
  std::vector<std::string> keys;
  for (int i = 0; i < 500; ++i) keys.push_back(absl::StrCat(std::string(i % 60, 'x'), i));
  for (int i = 0; i < 500; ++i) Put(keys[i], i, 1000 + i);
  for (int i = 0; i < 500; ++i) ASSERT_EQ(Tag(keys[i]), i) << i;
  EXPECT_EQ(shard_.Sweep(1249), 250);
  for (int i = 0; i < 500; ++i) ASSERT_EQ(Tag(keys[i]), i < 250 ? -1 : i) << i;
}

}  // namespace
}  // namespace tollgate::memory
