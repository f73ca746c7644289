// Copyright tollgate authors. One suite every Store implementation must pass.
//
// Included by one test file per group of stores, which adds factories and
// INSTANTIATE_TEST_SUITE_P (tests/store_conformance_test.cc: memory, and the resilient store
// over it, without Redis; tests/redis_conformance_test.cc: Redis, the sync store, and the
// resilient store answering from its fallback while Redis is down). A store whose time the
// test cannot control (Redis uses its own TIME) leaves `advance` empty; the cases that need it
// are skipped, and every other case holds without controlling time: the limits refill so
// slowly (or their windows are so long) that nothing refills while a case runs.
//
// Where a store's contract differs, its factory says so and the cases follow: the sync store
// decides fixed and sliding windows only (`algorithms`), so its cases use those; and its
// decisions are local between syncs, so its `advance` runs a sync after moving the clock (a
// decision after a wait is what it would be after the store's next round).
#ifndef TOLLGATE_TESTS_STORE_CONFORMANCE_H_
#define TOLLGATE_TESTS_STORE_CONFORMANCE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/support/batched_redis_store.h"
#include "tests/support/limits.h"
#include "tests/support/redis_stores.h"
#include "tollgate/clock.h"
#include "tollgate/limit.h"
#include "tollgate/redis_store.h"
#include "tollgate/resilience.h"
#include "tollgate/store.h"
#include "tollgate/timers.h"

namespace tollgate {
namespace {

constexpr int64_t kSecond = 1'000'000;
// Long enough that no window boundary passes during a case (for stores on real time).
constexpr int64_t kYear = 365LL * 24 * 3600 * kSecond;

struct StoreUnderTest {
  std::shared_ptr<Store> store;
  // Moves the store's time forward by the given microseconds; empty when the store keeps
  // its own time.
  std::function<void(int64_t)> advance;
  // The source the store's decisions carry.
  DecisionSource source = DecisionSource::kMemory;
  // Whether the store keeps reservations and leases (tests/metered_conformance.h); every
  // store takes charges.
  bool reservations_and_leases = true;
  // The algorithms the store decides, the first of them the one cases use where any will do.
  std::vector<Algorithm> algorithms = {Algorithm::kTokenBucket, Algorithm::kFixedWindow,
                                       Algorithm::kSlidingWindow};
};

// A RedisStore on the Redis (or Cluster) at `url`, as a store under test: it keeps its own
// time (TIME), so `advance` stays empty and the suite skips the cases that need it.
// `batched`: every request decided in a batch (tests/support/batched_redis_store.h).
inline absl::StatusOr<StoreUnderTest> RedisUnderTest(const std::string& url, bool batched = false) {
  absl::StatusOr<std::unique_ptr<RedisStore>> store = testing::ConnectRedisStore({.url = url});
  if (!store.ok()) return store.status();
  StoreUnderTest out;
  if (batched) {
    out.store = std::make_shared<testing::BatchedRedisStore>(*std::move(store));
  } else {
    out.store = std::shared_ptr<Store>(std::move(store).value());
  }
  out.source = DecisionSource::kRedis;
  return out;
}

struct StoreFactory {
  std::string name;
  std::function<absl::StatusOr<StoreUnderTest>()> make;
};

// A ResilientStore over the primary `make_primary` makes on the given clock (a primary may
// own what it needs, such as its redis-server), on a simulated clock and simulated timers
// that `advance` moves together.
inline absl::StatusOr<StoreUnderTest> ResilientOver(
    const std::function<absl::StatusOr<std::shared_ptr<Store>>(Clock*)>& make_primary,
    DecisionSource source) {
  // Destroyed in reverse: the store (and its primary) before the timers and the clock.
  struct Holder {
    SimulatedClock clock;
    std::shared_ptr<SimulatedTimers> timers = std::make_shared<SimulatedTimers>();
    std::unique_ptr<ResilientStore> store;
  };
  auto holder = std::make_shared<Holder>();
  absl::StatusOr<std::shared_ptr<Store>> primary = make_primary(&holder->clock);
  if (!primary.ok()) return primary.status();
  ResilienceOptions options;
  options.clock = &holder->clock;
  options.timers = holder->timers;
  absl::StatusOr<std::unique_ptr<ResilientStore>> store =
      ResilientStore::Create(*std::move(primary), options);
  if (!store.ok()) return store.status();
  holder->store = *std::move(store);
  StoreUnderTest out;
  out.store = std::shared_ptr<Store>(holder, holder->store.get());
  out.advance = [holder](int64_t micros) {
    holder->clock.AdvanceMicros(micros);
    holder->timers->AdvanceMicros(micros);
  };
  out.source = source;
  return out;
}

using ::tollgate::testing::TokenBucket;
using ::tollgate::testing::Window;

// A limit of `algorithm` with `max` units that do not come back while a case runs.
Limit SlowLimit(Algorithm algorithm, std::string name, int64_t max) {
  if (algorithm == Algorithm::kTokenBucket) {
    // Fills in 300 days: as slow as a bucket may be (ValidateLimit: within 365 days).
    return TokenBucket(std::move(name), max, static_cast<double>(max) / (300.0 * 86'400));
  }
  return Window(std::move(name), algorithm, max, kYear);
}

class StoreConformanceTest : public ::testing::TestWithParam<StoreFactory> {
 protected:
  void SetUp() override {
    absl::StatusOr<StoreUnderTest> made = GetParam().make();
    ASSERT_TRUE(made.ok()) << made.status();
    under_test_ = std::move(made).value();
    // Keys unique to this run, so a shared store (Redis) keeps no state between runs.
    std::random_device random;
    prefix_ = absl::StrCat("conformance:", random(), random(), ":",
                           ::testing::UnitTest::GetInstance()->current_test_info()->name(), ":");
  }

  Store& store() { return *under_test_.store; }

  // Slow limits of each algorithm the store decides.
  std::vector<Limit> SlowLimits(int64_t max) const {
    std::vector<Limit> limits;
    for (Algorithm algorithm : under_test_.algorithms) {
      limits.push_back(SlowLimit(
          algorithm, absl::StrCat("conformance_", std::string(AlgorithmName(algorithm))), max));
    }
    return limits;
  }
  // A slow limit of the first algorithm the store decides.
  Limit AnySlowLimit(std::string name, int64_t max) const {
    return SlowLimit(under_test_.algorithms.front(), std::move(name), max);
  }
  std::string Key(std::string_view name) const { return prefix_ + std::string(name); }

  Decision CheckOne(const Limit& limit, std::string_view key, int64_t cost = 1) {
    absl::StatusOr<std::vector<Decision>> decisions =
        store().Apply({CheckItem{&limit, Key(key), cost}});
    EXPECT_TRUE(decisions.ok()) << decisions.status();
    if (!decisions.ok() || decisions->size() != 1) {
      ADD_FAILURE() << "no decision";
      return Decision{};
    }
    return decisions->front();
  }

  // The store's single-item path: its PreparedCheck where it has one (the memory store),
  // else a one-item Apply.
  absl::StatusOr<Decision> SingleCheck(const Limit& limit, std::string_view key, int64_t cost) {
    if (std::unique_ptr<PreparedCheck> prepared = store().PrepareCheck(limit)) {
      return prepared->CheckOne(key, cost);
    }
    absl::StatusOr<std::vector<Decision>> decisions =
        store().Apply({CheckItem{&limit, std::string(key), cost}});
    if (!decisions.ok()) return decisions.status();
    return decisions->front();
  }

  StoreUnderTest under_test_;
  std::string prefix_;
};

TEST_P(StoreConformanceTest, AdmitsCapacityThenRefuses) {
  for (const Limit& limit : SlowLimits(5)) {
    for (int i = 0; i < 5; ++i) {
      Decision d = CheckOne(limit, "k");
      ASSERT_TRUE(d.allowed) << limit.name << " check " << i;
      EXPECT_EQ(d.limit, 5);
      EXPECT_EQ(d.remaining, 4 - i);
      EXPECT_EQ(d.retry_after_micros, 0);
      EXPECT_EQ(d.source, under_test_.source);
      EXPECT_EQ(d.reason, DenyReason::kNone);
    }
    Decision refused = CheckOne(limit, "k");
    EXPECT_FALSE(refused.allowed) << limit.name;
    EXPECT_EQ(refused.reason, DenyReason::kOverLimit);
    EXPECT_EQ(refused.remaining, 0);
    EXPECT_GT(refused.retry_after_micros, 0);
    EXPECT_EQ(refused.source, under_test_.source);
    // Keys are independent.
    EXPECT_TRUE(CheckOne(limit, "other").allowed) << limit.name;
  }
}

TEST_P(StoreConformanceTest, CostZeroPeeks) {
  for (const Limit& limit : SlowLimits(5)) {
    Decision fresh = CheckOne(limit, "k", 0);
    EXPECT_TRUE(fresh.allowed) << limit.name;
    EXPECT_EQ(fresh.remaining, 5);
    ASSERT_TRUE(CheckOne(limit, "k", 2).allowed);
    for (int i = 0; i < 3; ++i) {
      Decision peek = CheckOne(limit, "k", 0);
      EXPECT_TRUE(peek.allowed) << limit.name;
      EXPECT_EQ(peek.remaining, 3) << limit.name;
    }
    ASSERT_TRUE(CheckOne(limit, "k", 3).allowed);
    Decision empty = CheckOne(limit, "k", 0);
    EXPECT_TRUE(empty.allowed) << limit.name;  // a peek asks for nothing
    EXPECT_EQ(empty.remaining, 0);
  }
}

// A peek says when a cost of 1 would pass (retry_after), alone and inside a batch: 0 while
// something is left, else about what a refused cost-1 check answers.
TEST_P(StoreConformanceTest, APeekSaysWhenACostOfOneWouldPass) {
  for (const Limit& limit : SlowLimits(2)) {
    EXPECT_EQ(CheckOne(limit, "k", 0).retry_after_micros, 0) << limit.name;
    ASSERT_TRUE(CheckOne(limit, "k", 1).allowed);
    EXPECT_EQ(CheckOne(limit, "k", 0).retry_after_micros, 0) << limit.name;
    ASSERT_TRUE(CheckOne(limit, "k", 1).allowed);
    const Decision peek = CheckOne(limit, "k", 0);
    EXPECT_TRUE(peek.allowed) << limit.name;
    EXPECT_EQ(peek.reason, DenyReason::kNone);
    const Decision refused = CheckOne(limit, "k", 1);
    ASSERT_FALSE(refused.allowed) << limit.name;
    EXPECT_GT(peek.retry_after_micros, 0) << limit.name;
    // The stores' clocks move between the two calls; the waits are a year or more long.
    EXPECT_NEAR(static_cast<double>(peek.retry_after_micros),
                static_cast<double>(refused.retry_after_micros), 5e6)
        << limit.name;
    // In a batch (the Redis script's general path), beside another item.
    absl::StatusOr<std::vector<Decision>> batch =
        store().Apply({CheckItem{&limit, Key("k"), 0}, CheckItem{&limit, Key("other"), 1}});
    ASSERT_TRUE(batch.ok()) << batch.status();
    EXPECT_TRUE((*batch)[0].allowed && (*batch)[1].allowed) << limit.name;
    EXPECT_NEAR(static_cast<double>((*batch)[0].retry_after_micros),
                static_cast<double>(refused.retry_after_micros), 5e6)
        << limit.name;
    EXPECT_EQ((*batch)[1].retry_after_micros, 0) << limit.name;
  }
}

TEST_P(StoreConformanceTest, CostAboveTheLimitIsRefusedForGood) {
  for (const Limit& limit : SlowLimits(5)) {
    Decision d = CheckOne(limit, "k", 6);
    EXPECT_FALSE(d.allowed) << limit.name;
    EXPECT_EQ(d.reason, DenyReason::kCostExceedsLimit);
    EXPECT_EQ(d.retry_after_micros, 0);
    EXPECT_EQ(CheckOne(limit, "k", 0).remaining, 5) << limit.name;
    EXPECT_TRUE(CheckOne(limit, "k", 5).allowed) << limit.name;
  }
}

TEST_P(StoreConformanceTest, SeveralLimitsAreAllOrNothing) {
  const std::vector<Limit> limits = {AnySlowLimit("conformance_a", 5),
                                     Window("conformance_b", Algorithm::kFixedWindow, 1, kYear),
                                     Window("conformance_c", Algorithm::kSlidingWindow, 3, kYear)};
  auto batch = [&](int64_t cost) {
    std::vector<CheckItem> items;
    for (const Limit& limit : limits) items.push_back(CheckItem{&limit, Key("k"), cost});
    return items;
  };
  absl::StatusOr<std::vector<Decision>> first = store().Apply(batch(1));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->size(), 3u);
  for (const Decision& d : *first) EXPECT_TRUE(d.allowed);
  EXPECT_EQ((*first)[0].limit, 5);  // decisions come back in the items' order
  EXPECT_EQ((*first)[1].limit, 1);
  EXPECT_EQ((*first)[2].limit, 3);

  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<std::vector<Decision>> refused = store().Apply(batch(1));
    ASSERT_TRUE(refused.ok()) << refused.status();
    EXPECT_TRUE((*refused)[0].allowed);  // alone it would pass...
    EXPECT_FALSE((*refused)[1].allowed);
    EXPECT_EQ((*refused)[1].reason, DenyReason::kOverLimit);
    EXPECT_TRUE((*refused)[2].allowed);
  }
  // ...but the refused batches consumed nothing.
  absl::StatusOr<std::vector<Decision>> peek = store().Apply(batch(0));
  ASSERT_TRUE(peek.ok()) << peek.status();
  EXPECT_EQ((*peek)[0].remaining, 4);
  EXPECT_EQ((*peek)[1].remaining, 0);
  EXPECT_EQ((*peek)[2].remaining, 2);

  // A batch with a cost above one limit's maximum is refused as a whole too.
  std::vector<CheckItem> too_big = {CheckItem{&limits[0], Key("k2"), 1},
                                    CheckItem{&limits[2], Key("k2"), 4}};
  absl::StatusOr<std::vector<Decision>> big = store().Apply(std::move(too_big));
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ((*big)[1].reason, DenyReason::kCostExceedsLimit);
  EXPECT_EQ(CheckOne(limits[0], "k2", 0).remaining, 5);
}

TEST_P(StoreConformanceTest, SameKeyTwiceInOneBatch) {
  const Limit limit = AnySlowLimit("conformance_twice", 3);
  absl::StatusOr<std::vector<Decision>> refused =
      store().Apply({CheckItem{&limit, Key("k"), 2}, CheckItem{&limit, Key("k"), 2}});
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_TRUE((*refused)[0].allowed);
  EXPECT_FALSE((*refused)[1].allowed);
  EXPECT_EQ(CheckOne(limit, "k", 0).remaining, 3);

  absl::StatusOr<std::vector<Decision>> allowed =
      store().Apply({CheckItem{&limit, Key("k"), 1}, CheckItem{&limit, Key("k"), 2}});
  ASSERT_TRUE(allowed.ok()) << allowed.status();
  EXPECT_TRUE((*allowed)[0].allowed);
  EXPECT_TRUE((*allowed)[1].allowed);
  EXPECT_EQ((*allowed)[1].remaining, 0);
  EXPECT_FALSE(CheckOne(limit, "k").allowed);
}

TEST_P(StoreConformanceTest, ConcurrentChecksNeverOverAdmit) {
  constexpr int kThreads = 8;
  constexpr int kChecksPerThread = 40;
  constexpr int64_t kCapacity = 100;
  for (const Limit& limit : SlowLimits(kCapacity)) {
    std::atomic<int64_t> allowed{0};
    std::atomic<int64_t> errors{0};
    std::vector<std::thread> threads;
    const std::string key = Key("hot");
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < kChecksPerThread; ++i) {
          absl::StatusOr<std::vector<Decision>> d = store().Apply({CheckItem{&limit, key, 1}});
          if (!d.ok()) {
            errors.fetch_add(1);
          } else if (d->front().allowed) {
            allowed.fetch_add(1);
          }
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    EXPECT_EQ(errors.load(), 0);
    EXPECT_EQ(allowed.load(), kCapacity) << limit.name;
  }
}

// A refused batch consumed nothing, and its decisions say so: an item that alone would
// pass reports what it really has left, not that minus its cost.
TEST_P(StoreConformanceTest, ARefusedBatchReportsWhatIsReallyLeft) {
  const std::vector<Limit> limits = SlowLimits(5);
  const Limit full = Window("conformance_full", Algorithm::kFixedWindow, 1, kYear);
  ASSERT_TRUE(CheckOne(full, "k").allowed);
  std::vector<CheckItem> items;
  for (const Limit& limit : limits) items.push_back(CheckItem{&limit, Key("k"), 2});
  items.push_back(CheckItem{&full, Key("k"), 1});
  absl::StatusOr<std::vector<Decision>> refused = store().Apply(items);
  ASSERT_TRUE(refused.ok()) << refused.status();
  for (size_t i = 0; i < limits.size(); ++i) {
    EXPECT_TRUE((*refused)[i].allowed) << limits[i].name;
    EXPECT_EQ((*refused)[i].remaining, 5) << limits[i].name;
  }
  EXPECT_FALSE((*refused)[limits.size()].allowed);
  for (const Limit& limit : limits) EXPECT_EQ(CheckOne(limit, "k", 0).remaining, 5);
}

// Shadow items are decided in the same step but never refuse it: when every other item
// passes, all allowed items are consumed and a refused shadow item consumes nothing; when
// another item refuses, nothing is consumed, the shadow items included.
TEST_P(StoreConformanceTest, ShadowItemsNeverRefuseTheBatch) {
  for (const Limit& limit : SlowLimits(3)) {
    const Limit shadow_limit = Window("conformance_shadow", Algorithm::kFixedWindow, 1, kYear);
    ASSERT_TRUE(CheckOne(shadow_limit, limit.name).allowed);  // now full
    auto batch = [&](int64_t cost, bool with_passing_shadow) {
      std::vector<CheckItem> items = {CheckItem{&limit, Key("k"), cost},
                                      CheckItem{&shadow_limit, Key(limit.name), 1}};
      items[1].shadow = true;
      if (with_passing_shadow) {
        items.push_back(CheckItem{&limit, Key("shadow_passing"), 1});
        items.back().shadow = true;
      }
      return items;
    };
    absl::StatusOr<std::vector<Decision>> passed = store().Apply(batch(1, true));
    ASSERT_TRUE(passed.ok()) << passed.status();
    EXPECT_TRUE((*passed)[0].allowed) << limit.name;
    EXPECT_FALSE((*passed)[1].allowed) << limit.name;
    EXPECT_EQ((*passed)[1].reason, DenyReason::kOverLimit);
    EXPECT_TRUE((*passed)[2].allowed) << limit.name;
    EXPECT_EQ(CheckOne(limit, "k", 0).remaining, 2) << limit.name;  // consumed
    EXPECT_EQ(CheckOne(limit, "shadow_passing", 0).remaining, 2) << limit.name;
    EXPECT_EQ(CheckOne(shadow_limit, limit.name, 0).remaining, 0) << limit.name;

    // The enforced item refuses (cost 3 > 2 left): nothing is consumed, shadow or not.
    absl::StatusOr<std::vector<Decision>> refused = store().Apply(batch(3, true));
    ASSERT_TRUE(refused.ok()) << refused.status();
    EXPECT_FALSE((*refused)[0].allowed) << limit.name;
    EXPECT_TRUE((*refused)[2].allowed) << limit.name;
    EXPECT_EQ((*refused)[2].remaining, 2) << limit.name;  // not taken
    EXPECT_EQ(CheckOne(limit, "k", 0).remaining, 2) << limit.name;
    EXPECT_EQ(CheckOne(limit, "shadow_passing", 0).remaining, 2) << limit.name;

    // Shadow items only: the batch passes whatever they decide.
    std::vector<CheckItem> only_shadow = {CheckItem{&shadow_limit, Key(limit.name), 1}};
    only_shadow[0].shadow = true;
    only_shadow.push_back(only_shadow[0]);
    absl::StatusOr<std::vector<Decision>> shadow = store().Apply(only_shadow);
    ASSERT_TRUE(shadow.ok()) << shadow.status();
    EXPECT_FALSE((*shadow)[0].allowed);
  }
}

// Store::PrepareCheck's CheckOne (the single-item path, where a store has one) decides
// exactly as a one-item Apply does: two keys given the same sequence, one through each path.
TEST_P(StoreConformanceTest, SingleItemPathAgreesWithTheBatchPath) {
  const std::vector<int64_t> costs = {1, 0, 2, 6, 3, 1, 0, 5};
  for (const Limit& limit : SlowLimits(5)) {
    for (size_t i = 0; i < costs.size(); ++i) {
      absl::StatusOr<Decision> one = SingleCheck(limit, Key("single"), costs[i]);
      ASSERT_TRUE(one.ok()) << one.status();
      const Decision batch = CheckOne(limit, "batch", costs[i]);
      const std::string context = absl::StrCat(limit.name, " check ", i, " cost ", costs[i]);
      EXPECT_EQ(one->allowed, batch.allowed) << context;
      EXPECT_EQ(one->limit, batch.limit) << context;
      EXPECT_EQ(one->remaining, batch.remaining) << context;
      EXPECT_EQ(one->reason, batch.reason) << context;
      EXPECT_EQ(one->source, under_test_.source) << context;
      if (under_test_.advance) {
        // Time stands still here, so the times must agree to the microsecond too.
        EXPECT_EQ(one->retry_after_micros, batch.retry_after_micros) << context;
        EXPECT_EQ(one->reset_after_micros, batch.reset_after_micros) << context;
      }
    }
  }
  // A PreparedCheck validates its key (batches are validated by their callers).
  const std::vector<Limit> limits = SlowLimits(5);
  if (std::unique_ptr<PreparedCheck> prepared = store().PrepareCheck(limits.front())) {
    EXPECT_EQ(prepared->CheckOne("", 1).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST_P(StoreConformanceTest, ConcurrentSingleItemChecksNeverOverAdmit) {
  constexpr int kThreads = 8;
  constexpr int kChecksPerThread = 40;
  constexpr int64_t kCapacity = 100;
  for (const Limit& limit : SlowLimits(kCapacity)) {
    std::atomic<int64_t> allowed{0};
    std::atomic<int64_t> errors{0};
    std::vector<std::thread> threads;
    const std::string key = Key("hot_single");
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < kChecksPerThread; ++i) {
          absl::StatusOr<Decision> d = SingleCheck(limit, key, 1);
          if (!d.ok()) {
            errors.fetch_add(1);
          } else if (d->allowed) {
            allowed.fetch_add(1);
          }
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    EXPECT_EQ(errors.load(), 0);
    EXPECT_EQ(allowed.load(), kCapacity) << limit.name;
  }
}

// A refused check passes once its retry_after has passed, and not before. (A sliding
// window's retry_after is rounded up to the next microsecond, so it may pass 1 µs early.)
TEST_P(StoreConformanceTest, RefillsAfterRetryAfter) {
  if (!under_test_.advance) GTEST_SKIP() << "the store keeps its own time";
  for (Algorithm algorithm : under_test_.algorithms) {
    const std::string name =
        absl::StrCat("conformance_refill_", std::string(AlgorithmName(algorithm)));
    const Limit limit = algorithm == Algorithm::kTokenBucket ? TokenBucket(name, 2, 1)
                                                             : Window(name, algorithm, 2, kSecond);
    ASSERT_TRUE(CheckOne(limit, "k", 2).allowed) << limit.name;
    Decision refused = CheckOne(limit, "k");
    ASSERT_FALSE(refused.allowed) << limit.name;
    if (algorithm == Algorithm::kTokenBucket) {
      EXPECT_EQ(refused.retry_after_micros, kSecond);
    }
    const int64_t early = algorithm == Algorithm::kSlidingWindow ? 2 : 1;
    under_test_.advance(refused.retry_after_micros - early);
    EXPECT_FALSE(CheckOne(limit, "k").allowed) << limit.name;
    under_test_.advance(early);
    EXPECT_TRUE(CheckOne(limit, "k").allowed) << limit.name;
  }
}

}  // namespace
}  // namespace tollgate

#endif  // TOLLGATE_TESTS_STORE_CONFORMANCE_H_
