// Copyright tollgate authors. MemoryStore: what it keeps and for how long: expiry, sweeps, the
// max_keys bound and what is evicted there, and time that goes back.
#include <cstdint>
#include <memory>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/store/memory/memory_store_test_util.h"
#include "tollgate/clock.h"
#include "tollgate/limit.h"
#include "tollgate/memory_store.h"

namespace tollgate::memory_test {
namespace {

// Lease sets and reservation records live beside the entries, each table bounded by
// max_keys: at the bound a new key evicts the one whose expiry is soonest, so the oldest lease
// set frees its slots and the oldest reservation can no longer be settled (it stays charged).
TEST(MemoryStoreTest, LeaseSetsAndReservationsAreBoundedByMaxKeys) {
  SimulatedClock clock(1'700'000'000'000'000);
  auto store = NewStore(&clock, /*shards=*/1, /*max_keys=*/4);
  const Limit slots = Window("slots", Algorithm::kConcurrency, 1, 60 * kSecond);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(
        ApplyOne(*store, slots, absl::StrCat("k", i), 1, ItemOp::kCheck, absl::StrCat("lease", i))
            .allowed)
        << i;
    clock.AdvanceMicros(1000);  // each later than the one before
  }
  EXPECT_EQ(store->Evictions(), 6);
  EXPECT_TRUE(CheckOne(*store, slots, "k0", 0).remaining == 1);  // evicted: free again
  EXPECT_TRUE(CheckOne(*store, slots, "k9", 0).remaining == 0);  // kept
  EXPECT_EQ(store->Size(), 0);                                   // no rate entry was made for them

  const Limit tokens = TokenBucket("tokens", 100, 1e-5);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(ApplyOne(*store, tokens, "t", 10, ItemOp::kReserve, absl::StrCat("r", i)).allowed);
    clock.AdvanceMicros(1000);
  }
  EXPECT_EQ(store->Evictions(), 7);
  EXPECT_EQ(ApplyOne(*store, tokens, "t", 0, ItemOp::kSettle, "r0").reason, DenyReason::kNotFound);
  EXPECT_EQ(CheckOne(*store, tokens, "t", 0).remaining, 50);  // r0 stays charged
  EXPECT_TRUE(ApplyOne(*store, tokens, "t", 0, ItemOp::kSettle, "r4").allowed);
  EXPECT_EQ(CheckOne(*store, tokens, "t", 0).remaining, 60);
}

// Expired lease sets and reservation records go with Sweep, as idle entries do.
TEST(MemoryStoreTest, SweepRemovesExpiredLeaseSetsAndReservations) {
  SimulatedClock clock(1'700'000'000'000'000);
  auto store = NewStore(&clock);
  const Limit slots = Window("slots", Algorithm::kConcurrency, 2, kSecond);
  Limit fixed = Window("fixed", Algorithm::kFixedWindow, 10, kSecond);
  fixed.reservation_ttl_micros = kSecond;
  ASSERT_TRUE(ApplyOne(*store, slots, "k", 1, ItemOp::kCheck, "lease").allowed);
  ASSERT_TRUE(ApplyOne(*store, fixed, "k", 3, ItemOp::kReserve, "reservation").allowed);
  EXPECT_EQ(store->Sweep(), 0);
  clock.AdvanceMicros(kSecond);
  EXPECT_EQ(store->Sweep(), 3);  // the window's entry, the lease set, the reservation
  EXPECT_EQ(ApplyOne(*store, slots, "k", 1, ItemOp::kRenew, "lease").reason, DenyReason::kNotFound);
}

TEST(MemoryStoreTest, SweepRemovesIdleEntries) {
  SimulatedClock clock(1'700'000'000'000'000);
  auto store = NewStore(&clock);
  const Limit bucket = TokenBucket("bucket", 10, 10);  // full again 1 s after one use
  const Limit fixed = Window("fixed", Algorithm::kFixedWindow, 10, kSecond);
  const Limit sliding = Window("sliding", Algorithm::kSlidingWindow, 10, kSecond);
  for (int i = 0; i < 1000; ++i) {
    for (const Limit* limit : {&bucket, &fixed, &sliding}) {
      ASSERT_TRUE(CheckOne(*store, *limit, absl::StrCat("user:", i)).allowed);
    }
  }
  EXPECT_EQ(store->Size(), 3000);
  EXPECT_EQ(store->Sweep(), 0);  // nothing idle yet

  clock.AdvanceMicros(kSecond);  // the buckets and fixed windows are done
  EXPECT_EQ(store->Sweep(), 2000);
  EXPECT_EQ(store->Size(), 1000);
  clock.AdvanceMicros(kSecond);  // the sliding windows' counts no longer weigh
  EXPECT_EQ(store->Sweep(), 1000);
  EXPECT_EQ(store->Size(), 0);
}

TEST(MemoryStoreTest, ChecksSweepIdleEntriesAFewAtATime) {
  SimulatedClock clock;
  auto store = NewStore(&clock, /*shards=*/1);
  const Limit limit = TokenBucket("l", 10, 10);
  for (int i = 0; i < 1000; ++i) CheckOne(*store, limit, absl::StrCat("idle:", i));
  EXPECT_EQ(store->Size(), 1000);
  clock.AdvanceMicros(2 * kSecond);

  // Each check on other keys removes up to 4 expired entries of its shard.
  for (int i = 0; i < 100; ++i) CheckOne(*store, limit, absl::StrCat("busy:", i % 10), 0);
  EXPECT_EQ(store->Size(), 600);
  for (int i = 0; i < 150; ++i) CheckOne(*store, limit, absl::StrCat("busy:", i % 10), 0);
  EXPECT_EQ(store->Size(), 0);
}

TEST(MemoryStoreTest, ChecksSweepAcrossShards) {
  SimulatedClock clock;
  auto store = NewStore(&clock, /*shards=*/16);
  const Limit limit = TokenBucket("l", 10, 10);
  for (int i = 0; i < 1000; ++i) CheckOne(*store, limit, absl::StrCat("idle:", i));
  clock.AdvanceMicros(2 * kSecond);
  int checks = 0;
  while (store->Size() > 0 && checks < 100'000) {
    CheckOne(*store, limit, absl::StrCat("busy:", checks++), 0);
  }
  EXPECT_EQ(store->Size(), 0);
}

TEST(MemoryStoreTest, RecentlyUsedEntriesOutliveTheirFirstExpiry) {
  SimulatedClock clock;
  auto store = NewStore(&clock, /*shards=*/1);
  const Limit limit = TokenBucket("l", 10, 1);
  CheckOne(*store, limit, "k");  // full again in 1 s
  clock.AdvanceMicros(kSecond / 2);
  CheckOne(*store, limit, "k", 5);  // now full again in 5.5 s
  clock.AdvanceMicros(kSecond);     // past the first expiry
  EXPECT_EQ(store->Sweep(), 0);
  EXPECT_EQ(store->Size(), 1);
  EXPECT_EQ(CheckOne(*store, limit, "k", 0).remaining, 5);
  clock.AdvanceMicros(5 * kSecond);
  EXPECT_EQ(store->Sweep(), 1);
}

// At the bound every shard holds its share of max_keys; a new key evicts the entry of its
// shard that would expire soonest, and that key starts over with a full bucket.
TEST(MemoryStoreTest, FloodOfKeysStaysWithinMaxKeys) {
  SimulatedClock clock;
  constexpr int64_t kMaxKeys = 1000;
  auto store = NewStore(&clock, /*shards=*/16, kMaxKeys);
  const Limit limit = TokenBucket("l", 10, 0.001);  // nothing expires during the flood
  std::mt19937_64 rng(42);
  for (int i = 0; i < 10 * kMaxKeys; ++i) {
    ASSERT_TRUE(CheckOne(*store, limit, absl::StrCat("random:", rng())).allowed);
    if (i % 97 == 0) {
      ASSERT_LE(store->Size(), kMaxKeys);
    }
    clock.AdvanceMicros(1);
  }
  EXPECT_EQ(store->Size(), kMaxKeys);
  EXPECT_EQ(store->Evictions(), 10 * kMaxKeys - kMaxKeys);
}

TEST(MemoryStoreTest, MoreShardsThanKeysStillBoundsAndLimits) {
  SimulatedClock clock;
  auto store = NewStore(&clock, /*shards=*/64, /*max_keys=*/3);
  const Limit limit = TokenBucket("l", 1, 0.001);
  for (int i = 0; i < 100; ++i) {
    EXPECT_TRUE(CheckOne(*store, limit, absl::StrCat("k", i)).allowed);
    EXPECT_LE(store->Size(), 3);
  }
  // The most recent key is always kept, so it is limited.
  EXPECT_FALSE(CheckOne(*store, limit, "k99").allowed);
}

TEST(MemoryStoreTest, AtTheBoundTheHotKeyIsNotEvictedFirst) {
  SimulatedClock clock;
  auto store = NewStore(&clock, /*shards=*/1, /*max_keys=*/10);
  const Limit limit = TokenBucket("l", 100, 1);
  CheckOne(*store, limit, "hot");  // expires in 1 s: the soonest of all, for now
  clock.AdvanceMicros(100'000);
  for (int i = 1; i <= 9; ++i) CheckOne(*store, limit, absl::StrCat("cold:", i));  // 1.1 s
  clock.AdvanceMicros(100'000);
  for (int i = 0; i < 5; ++i) CheckOne(*store, limit, "hot");  // now full again in ~6 s
  EXPECT_EQ(store->Size(), 10);
  EXPECT_EQ(store->Evictions(), 0);

  clock.AdvanceMicros(100'000);
  CheckOne(*store, limit, "new");
  EXPECT_EQ(store->Size(), 10);
  EXPECT_EQ(store->Evictions(), 1);
  // The hot key kept its state (6 used, 0.3 s of refill)...
  EXPECT_EQ(CheckOne(*store, limit, "hot", 0).remaining, 94);
  // ...and exactly one cold key was evicted: it starts over with a full bucket.
  int full = 0;
  for (int i = 1; i <= 9; ++i) {
    if (CheckOne(*store, limit, absl::StrCat("cold:", i), 0).remaining == 100) ++full;
  }
  EXPECT_EQ(full, 1);
}

TEST(MemoryStoreTest, AtTheBoundExpiredEntriesGoBeforeLiveOnes) {
  SimulatedClock clock;
  auto store = NewStore(&clock, /*shards=*/1, /*max_keys=*/4);
  const Limit slow = TokenBucket("slow", 10, 0.001);
  const Limit fast = TokenBucket("fast", 10, 1000);
  CheckOne(*store, slow, "a");
  CheckOne(*store, slow, "b");
  CheckOne(*store, fast, "c");  // full again after 1 ms
  CheckOne(*store, fast, "d");
  clock.AdvanceMicros(2000);
  CheckOne(*store, slow, "e");
  CheckOne(*store, slow, "f");
  EXPECT_EQ(store->Evictions(), 0);  // c and d were swept, not evicted
  EXPECT_EQ(store->Size(), 4);
  EXPECT_EQ(CheckOne(*store, slow, "a", 0).remaining, 9);
  EXPECT_EQ(CheckOne(*store, slow, "b", 0).remaining, 9);
}

// A clock stepped back (an NTP correction) between checks of two keys in one shard: the
// second key is decided at the shard's latest decision time, not at its own earlier reading,
// through each path a check can take (CheckOne, a one-item batch, an all-or-nothing batch).
// It is then counted in the first key's window, and checked again once the clock is back, it
// is refused. Decided at its earlier reading, it would have been counted in a window six
// seconds back and allowed a second time within one window.
TEST(MemoryStoreTest, DecisionTimesInAShardNeverGoBack) {
  constexpr int64_t kStart = 1'700'000'000'000'000 + 300'000;  // 0.3 s into a window
  const Limit fixed = Window("fixed", Algorithm::kFixedWindow, 1, kSecond);
  for (int path = 0; path < 3; ++path) {
    SimulatedClock clock(kStart);
    auto store = NewStore(&clock, /*shards=*/1);
    EXPECT_TRUE(CheckOne(*store, fixed, "a").allowed);
    clock.AdvanceMicros(-5'500'000);
    Decision second;
    if (path == 0) {
      absl::StatusOr<Decision> one = store->CheckOne(fixed, "b", 1);
      ASSERT_TRUE(one.ok()) << one.status();
      second = *one;
    } else if (path == 1) {
      second = CheckOne(*store, fixed, "b");
    } else {
      auto both = store->Apply({CheckItem{&fixed, "b", 1}, CheckItem{&fixed, "c", 1}});
      ASSERT_TRUE(both.ok()) << both.status();
      second = both->at(0);
    }
    EXPECT_TRUE(second.allowed) << path;
    // Decided 0.3 s into the first key's window, it resets 0.7 s later (0.2 s at its reading).
    EXPECT_EQ(second.reset_after_micros, 700'000) << path;
    clock.AdvanceMicros(5'500'000);
    EXPECT_FALSE(CheckOne(*store, fixed, "b").allowed) << path;
  }
}

// Expiries far beyond any clock are kept as the latest one the store holds, never as an
// earlier time: an entry whose window ends in 73,000 years keeps its state when its first,
// short expiry comes up in the sweep.
TEST(MemoryStoreTest, AnEntryThatExpiresInTheFarFutureKeepsItsState) {
  SimulatedClock clock(1'700'000'000'000'000);
  auto store = NewStore(&clock);
  const Limit quick = TokenBucket("far", 10, 10);  // full again 0.1 s after a check
  const Limit far = Window("far", Algorithm::kFixedWindow, 5, int64_t{1} << 61);
  ASSERT_TRUE(CheckOne(*store, quick, "k").allowed);
  ASSERT_TRUE(CheckOne(*store, far, "k").allowed);
  clock.AdvanceMicros(int64_t{1000} * 365 * 24 * 3600 * kSecond);  // a thousand years
  EXPECT_EQ(store->Sweep(), 0);
  EXPECT_EQ(CheckOne(*store, far, "k", 0).remaining, 4);
}

}  // namespace
}  // namespace tollgate::memory_test
