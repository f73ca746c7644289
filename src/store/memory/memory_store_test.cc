// Copyright tollgate authors. MemoryStore: decisions by algorithm, exactness under contention,
// all-or-nothing batches, keys, invalid items.
#include "tollgate/memory_store.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/store/memory/memory_store_test_util.h"
#include "tollgate/clock.h"
#include "tollgate/limit.h"

namespace tollgate::memory_test {
namespace {

TEST(MemoryStoreTest, CreateValidatesOptions) {
  EXPECT_EQ(MemoryStore::Create({.shards = 0}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MemoryStore::Create({.shards = -3}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MemoryStore::Create({.max_keys = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto store = MemoryStore::Create({.shards = 3, .max_keys = 1});
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->Name(), "memory");
  EXPECT_EQ((*store)->Size(), 0);
}

TEST(MemoryStoreTest, DecidesWithTheLimitsAlgorithm) {
  SimulatedClock clock(1'700'000'000'000'000);  // a whole second: windows start here
  auto store = NewStore(&clock);
  const Limit bucket = TokenBucket("bucket", 2, 1);
  const Limit fixed = Window("fixed", Algorithm::kFixedWindow, 2, kSecond);
  const Limit sliding = Window("sliding", Algorithm::kSlidingWindow, 2, kSecond);
  for (const Limit* limit : {&bucket, &fixed, &sliding}) {
    Decision first = CheckOne(*store, *limit, "k");
    EXPECT_TRUE(first.allowed) << limit->name;
    EXPECT_EQ(first.source, DecisionSource::kMemory);
    EXPECT_EQ(first.limit, 2);
    EXPECT_EQ(first.remaining, 1);
    EXPECT_TRUE(CheckOne(*store, *limit, "k").allowed);
    Decision third = CheckOne(*store, *limit, "k");
    EXPECT_FALSE(third.allowed) << limit->name;
    EXPECT_EQ(third.reason, DenyReason::kOverLimit);
    EXPECT_GT(third.retry_after_micros, 0);
    // Another key of the same limit, and the same key of another limit, are separate.
    EXPECT_TRUE(CheckOne(*store, *limit, "other").allowed);
  }
  EXPECT_EQ(store->Size(), 6);
  clock.AdvanceMicros(kSecond);
  EXPECT_TRUE(CheckOne(*store, bucket, "k").allowed);
  EXPECT_TRUE(CheckOne(*store, fixed, "k").allowed);
}

TEST(MemoryStoreTest, RejectsInvalidItems) {
  SimulatedClock clock;
  auto store = NewStore(&clock);
  const Limit good = TokenBucket("good", 1, 1);
  const Limit bad = TokenBucket("bad", 0, 1);
  const Limit no_rate = TokenBucket("no_rate", 1, 0);
  const Limit no_window = Window("no_window", Algorithm::kFixedWindow, 1, 0);
  EXPECT_EQ(store->Apply({CheckItem{&good, "k", -1}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Apply({CheckItem{&good, "", 1}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Apply({CheckItem{nullptr, "k", 1}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  for (const Limit* limit : {&bad, &no_rate, &no_window}) {
    EXPECT_EQ(store->Apply({CheckItem{&good, "k", 1}, CheckItem{limit, "k", 1}}).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  // An invalid batch consumed nothing.
  EXPECT_EQ(store->Size(), 0);
}

// Exactness under contention: with time frozen nothing refills, so exactly `capacity`
// checks pass however the 16 threads interleave.
class MemoryStoreConcurrencyTest : public ::testing::TestWithParam<Algorithm> {};

TEST_P(MemoryStoreConcurrencyTest, SixteenThreadsOnOneKeyAdmitExactlyCapacity) {
  constexpr int kThreads = 16;
  constexpr int kChecksPerThread = 250;
  constexpr int64_t kCapacity = 1000;
  SimulatedClock clock(1'700'000'000'000'000);
  auto store = NewStore(&clock);
  const Limit limit = GetParam() == Algorithm::kTokenBucket
                          ? TokenBucket("hot", kCapacity, 1)
                          : Window("hot", GetParam(), kCapacity, 60 * kSecond);
  for (int round = 0; round < 3; ++round) {
    std::atomic<int64_t> allowed{0};
    std::atomic<int64_t> errors{0};
    std::vector<std::thread> threads;
    threads.reserve(kThreads);
    const std::string key = absl::StrCat("user:", round);
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < kChecksPerThread; ++i) {
          // Mix single checks with two-item batches on the same key.
          std::vector<CheckItem> items{CheckItem{&limit, key, 1}};
          if (i % 5 == 0) items.push_back(CheckItem{&limit, key, 1});
          auto decisions = store->Apply(std::move(items));
          if (!decisions.ok()) {
            errors.fetch_add(1);
            continue;
          }
          bool all = true;
          for (const Decision& d : *decisions) all = all && d.allowed;
          if (all) allowed.fetch_add(static_cast<int64_t>(decisions->size()));
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    EXPECT_EQ(errors.load(), 0);
    EXPECT_EQ(allowed.load(), kCapacity) << "round " << round;
    EXPECT_EQ(CheckOne(*store, limit, key, 0).remaining, 0);
  }
}

// The same through the single-item paths (CheckOne by Limit and by PreparedLimit, every
// thread taking each in turn), which take no batch route: both paths share the key's entry.
TEST_P(MemoryStoreConcurrencyTest, SixteenThreadsThroughCheckOneAdmitExactlyCapacity) {
  constexpr int kThreads = 16;
  constexpr int kChecksPerThread = 250;
  constexpr int64_t kCapacity = 1000;
  SimulatedClock clock(1'700'000'000'000'000);
  auto store = NewStore(&clock);
  const Limit limit = GetParam() == Algorithm::kTokenBucket
                          ? TokenBucket("hot", kCapacity, 1)
                          : Window("hot", GetParam(), kCapacity, 60 * kSecond);
  const absl::StatusOr<PreparedLimit> prepared = store->Prepare(limit);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  for (int round = 0; round < 3; ++round) {
    std::atomic<int64_t> allowed{0};
    std::atomic<int64_t> errors{0};
    std::vector<std::thread> threads;
    threads.reserve(kThreads);
    const std::string key = absl::StrCat("user:", round);
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < kChecksPerThread; ++i) {
          absl::StatusOr<Decision> decision =
              i % 2 == 0 ? store->CheckOne(limit, key, 1) : store->CheckOne(*prepared, key, 1);
          if (!decision.ok()) {
            errors.fetch_add(1);
          } else if (decision->allowed) {
            allowed.fetch_add(1);
          }
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    EXPECT_EQ(errors.load(), 0);
    EXPECT_EQ(allowed.load(), kCapacity) << "round " << round;
    EXPECT_EQ(CheckOne(*store, limit, key, 0).remaining, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, MemoryStoreConcurrencyTest,
                         ::testing::Values(Algorithm::kTokenBucket, Algorithm::kFixedWindow,
                                           Algorithm::kSlidingWindow));

// The stored key is the limit name and the key with the split between them: limit "ab" with
// key "c" and limit "a" with key "bc" are different entries, inline or not.
TEST(MemoryStoreTest, WhereTheNameEndsIsPartOfTheKey) {
  SimulatedClock clock;
  auto store = NewStore(&clock, /*shards=*/1);
  for (const std::string& tail : {std::string(), std::string(40, 'z')}) {
    const Limit ab = TokenBucket("ab", 2, 1);
    const Limit a = TokenBucket("a", 2, 1);
    EXPECT_TRUE(CheckOne(*store, ab, "c" + tail, 2).allowed);
    EXPECT_TRUE(CheckOne(*store, a, "bc" + tail, 1).allowed) << tail.size();
    EXPECT_EQ(CheckOne(*store, a, "bc" + tail, 0).remaining, 1) << tail.size();
    EXPECT_EQ(CheckOne(*store, ab, "c" + tail, 0).remaining, 0) << tail.size();
  }
  EXPECT_EQ(store->Size(), 4);
}

TEST(MemoryStoreTest, CheckOneRejectsInvalidItems) {
  SimulatedClock clock;
  auto store = NewStore(&clock);
  const Limit good = TokenBucket("good", 1, 1);
  const Limit bad = TokenBucket("bad", 0, 1);
  EXPECT_EQ(store->CheckOne(good, "k", -1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->CheckOne(good, "", 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->CheckOne(bad, "k", 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Size(), 0);
}

TEST(MemoryStoreTest, SeveralLimitsAreAllOrNothing) {
  SimulatedClock clock(1'700'000'000'000'000);
  auto store = NewStore(&clock);
  const Limit per_user = TokenBucket("per_user", 5, 1);
  const Limit per_ip = Window("per_ip", Algorithm::kFixedWindow, 1, 60 * kSecond);
  const Limit global = Window("global", Algorithm::kSlidingWindow, 100, 60 * kSecond);
  auto batch = [&](int64_t cost) {
    return std::vector<CheckItem>{CheckItem{&per_user, "u1", cost},
                                  CheckItem{&per_ip, "10.0.0.1", cost},
                                  CheckItem{&global, "all", cost}};
  };

  auto first = store->Apply(batch(1));
  ASSERT_TRUE(first.ok());
  for (const Decision& d : *first) EXPECT_TRUE(d.allowed);
  EXPECT_EQ((*first)[0].remaining, 4);
  EXPECT_EQ((*first)[1].remaining, 0);
  EXPECT_EQ((*first)[2].remaining, 99);

  // per_ip is spent: the batch is refused, and the others say they alone would pass.
  for (int i = 0; i < 3; ++i) {
    auto refused = store->Apply(batch(1));
    ASSERT_TRUE(refused.ok());
    EXPECT_TRUE((*refused)[0].allowed);
    EXPECT_FALSE((*refused)[1].allowed);
    EXPECT_EQ((*refused)[1].reason, DenyReason::kOverLimit);
    EXPECT_TRUE((*refused)[2].allowed);
  }
  // Nothing was consumed by the refusals: peeks show the state after the first batch.
  auto peek = store->Apply(batch(0));
  ASSERT_TRUE(peek.ok());
  EXPECT_EQ((*peek)[0].remaining, 4);
  EXPECT_EQ((*peek)[1].remaining, 0);
  EXPECT_EQ((*peek)[2].remaining, 99);
  EXPECT_EQ(CheckOne(*store, per_user, "u1", 4).remaining, 0);
}

TEST(MemoryStoreTest, SameKeyTwiceInOneBatchSeesItsOwnTentativeState) {
  SimulatedClock clock;
  auto store = NewStore(&clock);
  const Limit limit = TokenBucket("l", 3, 1);
  // 2 + 2 > 3: the second item sees 1 token left, so the whole batch is refused.
  auto refused = store->Apply({CheckItem{&limit, "k", 2}, CheckItem{&limit, "k", 2}});
  ASSERT_TRUE(refused.ok());
  EXPECT_TRUE((*refused)[0].allowed);
  EXPECT_FALSE((*refused)[1].allowed);
  EXPECT_EQ(CheckOne(*store, limit, "k", 0).remaining, 3);
  EXPECT_EQ(store->Size(), 0);

  auto allowed = store->Apply({CheckItem{&limit, "k", 1}, CheckItem{&limit, "k", 2}});
  ASSERT_TRUE(allowed.ok());
  EXPECT_TRUE((*allowed)[0].allowed);
  EXPECT_EQ((*allowed)[0].remaining, 2);
  EXPECT_TRUE((*allowed)[1].allowed);
  EXPECT_EQ((*allowed)[1].remaining, 0);
  EXPECT_EQ(CheckOne(*store, limit, "k", 0).remaining, 0);
  EXPECT_EQ(store->Size(), 1);
}

TEST(MemoryStoreTest, KeysOfAnyLengthKeepTheirOwnState) {
  SimulatedClock clock;
  auto store = NewStore(&clock, /*shards=*/4);
  const Limit limit = TokenBucket("l", 10, 1);
  // Short keys are stored inline, long ones on the heap; both must survive rehashing and
  // heap reordering.
  auto key = [](int i) {
    return std::string(1 + (i * 37) % 1024, static_cast<char>('a' + i % 26)) + absl::StrCat(i);
  };
  for (int i = 0; i < 2000; ++i) ASSERT_TRUE(CheckOne(*store, limit, key(i), 1 + i % 3).allowed);
  EXPECT_EQ(store->Size(), 2000);
  for (int i = 0; i < 2000; ++i) {
    ASSERT_EQ(CheckOne(*store, limit, key(i), 0).remaining, 10 - (1 + i % 3)) << i;
  }
  clock.AdvanceMicros(3 * kSecond);
  EXPECT_EQ(store->Sweep(), 2000);
  EXPECT_EQ(store->Size(), 0);

  // The same at the bound, where long keys are evicted too.
  auto bounded = NewStore(&clock, /*shards=*/4, /*max_keys=*/100);
  for (int i = 0; i < 2000; ++i) {
    ASSERT_TRUE(CheckOne(*bounded, limit, key(i)).allowed);
    ASSERT_FALSE(CheckOne(*bounded, limit, key(i), 10).allowed);  // its state was kept
  }
  EXPECT_EQ(bounded->Size(), 100);
  EXPECT_EQ(bounded->Evictions(), 1900);
}

TEST(MemoryStoreTest, PeeksAndFullBucketsStoreNothing) {
  SimulatedClock clock;
  auto store = NewStore(&clock);
  const Limit limit = TokenBucket("l", 3, 1);
  for (int i = 0; i < 100; ++i) {
    EXPECT_TRUE(CheckOne(*store, limit, absl::StrCat("k", i), 0).allowed);
    EXPECT_EQ(CheckOne(*store, limit, absl::StrCat("k", i), 4).reason,
              DenyReason::kCostExceedsLimit);
  }
  EXPECT_EQ(store->Size(), 0);
}

TEST(MemoryStoreTest, TimeGoingBackwardsAddsNothing) {
  SimulatedClock clock(1'700'000'000'000'000);
  auto store = NewStore(&clock);
  const Limit bucket = TokenBucket("bucket", 2, 1);
  const Limit fixed = Window("fixed", Algorithm::kFixedWindow, 2, kSecond);
  for (const Limit* limit : {&bucket, &fixed}) {
    CheckOne(*store, *limit, "k", 2);
    clock.AdvanceMicros(-5 * kSecond);
    EXPECT_FALSE(CheckOne(*store, *limit, "k").allowed) << limit->name;
    clock.AdvanceMicros(5 * kSecond);
  }
}

}  // namespace
}  // namespace tollgate::memory_test
