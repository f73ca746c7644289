// Copyright tollgate authors. SyncStore's rules, driven by a SimulatedClock and explicit
// SyncNow() calls against a real redis-server.
#include "tollgate/sync_store.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/algorithm/fixed_window.h"
#include "src/store/redis/client.h"
#include "src/store/redis/redis_url.h"
#include "tests/support/redis_server.h"
#include "tests/support/redis_test.h"
#include "tests/support/sync_stores.h"
#include "tollgate/clock.h"
#include "tollgate/timers.h"

namespace tollgate {
namespace {

using ::testing::HasSubstr;
using testing::RedisServer;

constexpr int64_t kSecond = 1'000'000;
// A window start, so tests know how much of the window is left.
constexpr int64_t kStart = 1'700'000'000LL * kSecond;

Limit Window(std::string name, Algorithm algorithm, int64_t max, int64_t window_micros,
             int64_t sync_interval_micros = 100'000) {
  Limit limit;
  limit.name = std::move(name);
  limit.mode = Mode::kSync;
  limit.numbers.algorithm = algorithm;
  limit.numbers.limit = max;
  limit.numbers.window_micros = window_micros;
  limit.sync_interval_micros = sync_interval_micros;
  // These tests check the grant mechanics with first shares of limit / N; demand shares are
  // tests/sync_multi_instance_test.cc's (SyncSharesTest) and tests/sync_script_test.cc's.
  limit.shares = Shares::kEqual;
  return limit;
}

class SyncStoreTest : public testing::RedisTest {
 protected:
  std::unique_ptr<SyncStore> NewStore(int64_t instances, SyncStoreOptions options = {},
                                      RedisConnectionsOptions connection = {}) {
    return testing::SimulatedSyncStore(server_->url(), &clock_, instances, std::move(options),
                                       std::move(connection));
  }

  // The counter the exact RedisStore would use for `key` at the clock's current window.
  // After a Redis restart the test's own connection comes back on its reconnect backoff, so
  // the read is retried until Redis answers (with a generous deadline).
  int64_t RedisCount(const Limit& limit, const std::string& key, int64_t index_offset = 0) {
    const int64_t index =
        algorithm::WindowIndex(clock_.NowMicros(), limit.numbers.window_micros) + index_offset;
    const std::string counter = absl::StrCat("tollgate:", limit.name, ":{", key, "}:", index);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    absl::StatusOr<redis::RedisReply> reply = client_->Command({"GET", counter});
    while (!reply.ok() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      reply = client_->Command({"GET", counter});
    }
    EXPECT_TRUE(reply.ok()) << reply.status();
    int64_t value = 0;
    if (reply.ok() && reply->type == redis::RedisReply::Type::kString) {
      EXPECT_TRUE(absl::SimpleAtoi(reply->str, &value));
    }
    return value;
  }

  // Runs SyncNow() until Redis answers again: the store reconnects on its own backoff, so
  // the wait has a generous deadline (a loaded machine) and no count of attempts. Failed
  // rounds keep their deltas (and rounds without deltas are not kept), so retrying is safe.
  static absl::Status SyncOnceRedisIsBack(SyncStore& store) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    absl::Status synced = store.SyncNow();
    while (!synced.ok() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      synced = store.SyncNow();
    }
    return synced;
  }

  // How many of `count` single-unit checks pass.
  static int64_t Admit(SyncStore& store, const Limit& limit, const std::string& key,
                       int64_t count) {
    int64_t admitted = 0;
    for (int64_t i = 0; i < count; ++i) {
      absl::StatusOr<std::vector<Decision>> d = store.Apply({{&limit, key, 1}});
      EXPECT_TRUE(d.ok()) << d.status();
      if (d.ok() && (*d)[0].allowed) ++admitted;
    }
    return admitted;
  }

  SimulatedClock clock_{kStart};
};

TEST_F(SyncStoreTest, SpendsOnlyWhatItIsGrantedBetweenSyncs) {
  std::unique_ptr<SyncStore> a = NewStore(/*instances=*/2);
  std::unique_ptr<SyncStore> b = NewStore(2);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const Limit limit = Window("api", Algorithm::kFixedWindow, 100, 60 * kSecond);

  // Before its first sync of a window, each instance may spend 100 / 2.
  EXPECT_EQ(Admit(*a, limit, "k", 80), 50);
  absl::StatusOr<std::vector<Decision>> refused = a->Apply({{&limit, "k", 1}});
  ASSERT_TRUE(refused.ok());
  EXPECT_FALSE((*refused)[0].allowed);
  EXPECT_EQ((*refused)[0].reason, DenyReason::kOverLimit);
  EXPECT_EQ((*refused)[0].source, DecisionSource::kSync);
  EXPECT_GT((*refused)[0].retry_after_micros, 0);
  EXPECT_EQ(Admit(*b, limit, "k", 10), 10);

  // a syncs: 50 counted, and b (not synced yet) may still hold its first 50: nothing left.
  ASSERT_TRUE(a->SyncNow().ok());
  EXPECT_EQ(RedisCount(limit, "k"), 50);
  EXPECT_EQ(Admit(*a, limit, "k", 5), 0);
  // b syncs: 60 counted, a holds 0: b gets half of the 40 left.
  ASSERT_TRUE(b->SyncNow().ok());
  EXPECT_EQ(Admit(*b, limit, "k", 30), 20);
  // a syncs again: 60 counted, b holds 20: a gets half of the 20 left.
  ASSERT_TRUE(a->SyncNow().ok());
  EXPECT_EQ(Admit(*a, limit, "k", 30), 10);
  ASSERT_TRUE(a->SyncNow().ok());
  ASSERT_TRUE(b->SyncNow().ok());
  EXPECT_EQ(RedisCount(limit, "k"), 90);
  EXPECT_EQ(a->stats().syncs, 3);
}

TEST_F(SyncStoreTest, InstancesWithTheSameViewNeverOvershoot) {
  std::vector<std::unique_ptr<SyncStore>> stores;
  for (int i = 0; i < 4; ++i) stores.push_back(NewStore(4));
  const Limit limit = Window("api", Algorithm::kFixedWindow, 103, 60 * kSecond);
  int64_t admitted = 0;
  // Rounds of: every instance spends all it may, then all sync.
  for (int round = 0; round < 20; ++round) {
    for (auto& store : stores) admitted += Admit(*store, limit, "k", 50);
    for (auto& store : stores) ASSERT_TRUE(store->SyncNow().ok());
    for (auto& store : stores) ASSERT_TRUE(store->SyncNow().ok());  // everyone sees the total
  }
  EXPECT_LE(admitted, 103);
  // Floor shares leave at most N - 1 units unused.
  EXPECT_GE(admitted, 100);
  EXPECT_EQ(RedisCount(limit, "k"), admitted);

  // The next window starts from zero again.
  clock_.AdvanceMicros(60 * kSecond);
  EXPECT_EQ(Admit(*stores[0], limit, "k", 50), 103 / 4);
}

TEST_F(SyncStoreTest, SlidingWindowSharesWhatTheEstimateLeaves) {
  std::unique_ptr<SyncStore> a = NewStore(2);
  std::unique_ptr<SyncStore> b = NewStore(2);
  const Limit limit = Window("slide", Algorithm::kSlidingWindow, 100, 10 * kSecond);
  EXPECT_EQ(Admit(*a, limit, "k", 80), 50);
  EXPECT_EQ(Admit(*b, limit, "k", 80), 50);
  ASSERT_TRUE(a->SyncNow().ok());
  ASSERT_TRUE(b->SyncNow().ok());
  ASSERT_TRUE(a->SyncNow().ok());

  // Start of the next window: the previous 100 weigh fully; nothing is left.
  clock_.AdvanceMicros(10 * kSecond);
  EXPECT_EQ(Admit(*a, limit, "k", 10), 0);
  // Halfway: the previous window weighs 50, so 50 are left. Until it syncs, a spends only
  // what is left of its last grant (0); its sync brings half of the 50.
  clock_.AdvanceMicros(5 * kSecond);
  EXPECT_EQ(Admit(*a, limit, "k", 40), 0);
  ASSERT_TRUE(a->SyncNow().ok());
  EXPECT_EQ(Admit(*a, limit, "k", 40), 25);
  ASSERT_TRUE(a->SyncNow().ok());
  EXPECT_EQ(RedisCount(limit, "k"), 25);
  EXPECT_EQ(RedisCount(limit, "k", -1), 100);
}

// A sliding window's estimate does not restart at a boundary, so neither do grants: before
// its first sync of a window an instance spends what is left of its last grant, which the
// others' scripts hold back. (Spending 1/N of what its own, older view leaves, as the first
// version did, admitted 112 here: a's view missed the 25 that b admitted late in window 0.)
TEST_F(SyncStoreTest, SlidingWindowGrantsCarryOverTheBoundary) {
  std::unique_ptr<SyncStore> a = NewStore(2);
  std::unique_ptr<SyncStore> b = NewStore(2);
  const Limit limit = Window("slide", Algorithm::kSlidingWindow, 100, 10 * kSecond);
  ASSERT_TRUE(b->Apply({{&limit, "k", 0}}).ok());  // b tracks the key too
  EXPECT_EQ(Admit(*a, limit, "k", 50), 50);        // its first share, 100 / 2
  ASSERT_TRUE(a->SyncNow().ok());                  // 50 counted, b may still spend 50: a gets 0
  ASSERT_TRUE(b->SyncNow().ok());                  // b gets half of the 50 left
  ASSERT_TRUE(a->SyncNow().ok());                  // a gets half of what b does not hold: 12
  clock_.AdvanceMicros(9 * kSecond);
  EXPECT_EQ(Admit(*b, limit, "k", 50), 25);  // late in the window, not synced

  // Window 1 starts: the previous window's 75 weigh fully, though a saw only 50.
  clock_.AdvanceMicros(kSecond);
  EXPECT_EQ(Admit(*a, limit, "k", 50), 12);
  EXPECT_EQ(Admit(*b, limit, "k", 50), 0);
  ASSERT_TRUE(b->SyncNow().ok());
  ASSERT_TRUE(a->SyncNow().ok());
  EXPECT_EQ(RedisCount(limit, "k", -1), 75);
  EXPECT_EQ(RedisCount(limit, "k"), 12);
  // b got half of what was neither counted (75) nor held for a (its 12): 6; a, once its 12
  // were counted, half of 100 - 87 - 6: 3.
  EXPECT_EQ(Admit(*b, limit, "k", 50), 6);
  EXPECT_EQ(Admit(*a, limit, "k", 50), 3);
}

TEST_F(SyncStoreTest, RefusesTokenBucketNamingTheLimit) {
  std::unique_ptr<SyncStore> store = NewStore(1);
  Limit limit;
  limit.name = "bucket";
  limit.mode = Mode::kSync;
  limit.numbers.capacity = 10;
  limit.numbers.refill_per_second = 1;
  absl::StatusOr<std::vector<Decision>> result = store->Apply({{&limit, "k", 1}});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("'bucket'"));
  EXPECT_THAT(result.status().message(), HasSubstr("token_bucket"));

  Limit fast = Window("fast", Algorithm::kFixedWindow, 10, kSecond, /*sync_interval_micros=*/1000);
  EXPECT_EQ(store->Apply({{&fast, "k", 1}}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SyncStoreTest, AllOrNothingAcrossItems) {
  std::unique_ptr<SyncStore> store = NewStore(1);
  const Limit wide = Window("wide", Algorithm::kFixedWindow, 100, 60 * kSecond);
  const Limit narrow = Window("narrow", Algorithm::kFixedWindow, 1, 60 * kSecond);
  ASSERT_TRUE(store->Apply({{&narrow, "k", 1}}).ok());
  absl::StatusOr<std::vector<Decision>> both = store->Apply({{&wide, "k", 5}, {&narrow, "k", 1}});
  ASSERT_TRUE(both.ok());
  EXPECT_TRUE((*both)[0].allowed);  // would pass alone
  EXPECT_FALSE((*both)[1].allowed);
  ASSERT_TRUE(store->SyncNow().ok());
  EXPECT_EQ(RedisCount(wide, "k"), 0);  // nothing consumed
  // The same key twice in one call sees its own first use.
  const Limit two = Window("two", Algorithm::kFixedWindow, 2, 60 * kSecond);
  absl::StatusOr<std::vector<Decision>> twice = store->Apply({{&two, "k", 2}, {&two, "k", 1}});
  ASSERT_TRUE(twice.ok());
  EXPECT_FALSE((*twice)[1].allowed);
  EXPECT_EQ(Admit(*store, two, "k", 5), 2);
}

TEST_F(SyncStoreTest, ColdKeysStopSyncingAndAreForgottenAfterTheirWindow) {
  std::unique_ptr<SyncStore> store = NewStore(1);
  const Limit limit = Window("api", Algorithm::kFixedWindow, 100, 10 * kSecond, 100'000);
  EXPECT_EQ(Admit(*store, limit, "k", 3), 3);
  ASSERT_TRUE(store->SyncNow().ok());
  EXPECT_EQ(store->stats().keys_tracked, 1);
  const int64_t commands = store->stats().redis_commands;

  // No check and no delta for 2 intervals: no more Redis work for this key.
  clock_.AdvanceMillis(300);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(store->SyncNow().ok());
  EXPECT_EQ(store->stats().redis_commands, commands);
  EXPECT_EQ(store->stats().keys_tracked, 1);  // still counts for this window

  // A check makes it hot again; it keeps its view of the window.
  EXPECT_EQ(Admit(*store, limit, "k", 1), 1);
  ASSERT_TRUE(store->SyncNow().ok());
  EXPECT_EQ(store->stats().redis_commands, commands + 1);
  EXPECT_EQ(RedisCount(limit, "k"), 4);

  // Once its window is over it is dropped from memory.
  clock_.AdvanceMicros(10 * kSecond);
  ASSERT_TRUE(store->SyncNow().ok());
  EXPECT_EQ(store->stats().keys_tracked, 0);
}

TEST_F(SyncStoreTest, KeysBeyondMaxKeysGetALocalShareAndAreNotSynced) {
  SyncStoreOptions options;
  options.max_keys = 2;
  std::unique_ptr<SyncStore> store = NewStore(4, options);
  const Limit limit = Window("api", Algorithm::kFixedWindow, 8, 60 * kSecond);
  EXPECT_EQ(Admit(*store, limit, "a", 5), 2);
  EXPECT_EQ(Admit(*store, limit, "b", 5), 2);
  // The third key: decided locally at floor(8 / 4) = 2 per window, never sent to Redis.
  EXPECT_EQ(Admit(*store, limit, "c", 5), 2);
  EXPECT_EQ(store->stats().keys_tracked, 2);
  EXPECT_EQ(store->stats().overflow_decisions, 5);
  ASSERT_TRUE(store->SyncNow().ok());
  EXPECT_EQ(RedisCount(limit, "a"), 2);
  EXPECT_EQ(RedisCount(limit, "c"), 0);
}

TEST_F(SyncStoreTest, FailClosedRefusesOnceTheLastSyncIsTooOld) {
  std::unique_ptr<SyncStore> store = NewStore(1);
  Limit limit = Window("otp", Algorithm::kFixedWindow, 100, 60 * kSecond, 100'000);
  limit.on_store_failure = FailureMode::kFailClosed;
  limit.allow_sync_with_fail_closed = true;
  EXPECT_EQ(Admit(*store, limit, "k", 1), 1);
  clock_.AdvanceMillis(201);  // 2 intervals and a bit without a sync
  absl::StatusOr<std::vector<Decision>> refused = store->Apply({{&limit, "k", 1}});
  ASSERT_TRUE(refused.ok());
  EXPECT_FALSE((*refused)[0].allowed);
  EXPECT_EQ((*refused)[0].reason, DenyReason::kStoreUnavailable);
  ASSERT_TRUE(store->SyncNow().ok());
  EXPECT_EQ(Admit(*store, limit, "k", 1), 1);

  // fail_open keeps deciding with the share rule however old the last sync is.
  const Limit open = Window("open", Algorithm::kFixedWindow, 100, 60 * kSecond, 100'000);
  clock_.AdvanceMicros(5 * kSecond);
  EXPECT_EQ(Admit(*store, open, "k", 1), 1);
}

TEST_F(SyncStoreTest, DeltasOfAFailedSyncAreSentOnceWhenRedisReturns) {
  std::unique_ptr<SyncStore> store =
      NewStore(1, {}, {.connections = 1, .reply_timeout_ms = 200, .reconnect_max_ms = 50});
  const Limit limit = Window("api", Algorithm::kFixedWindow, 1000, 60 * kSecond);
  EXPECT_EQ(Admit(*store, limit, "k", 10), 10);
  ASSERT_TRUE(store->SyncNow().ok());

  server_->Pause();
  EXPECT_EQ(Admit(*store, limit, "k", 7), 7);
  EXPECT_FALSE(store->SyncNow().ok());  // no reply: maybe applied once Redis resumes
  EXPECT_EQ(Admit(*store, limit, "k", 5), 5);
  EXPECT_FALSE(store->SyncNow().ok());
  server_->Resume();

  const absl::Status synced = SyncOnceRedisIsBack(*store);
  ASSERT_TRUE(synced.ok()) << synced;
  EXPECT_EQ(RedisCount(limit, "k"), 22);  // every unit once, whatever Redis ran while paused
  EXPECT_GE(store->stats().sync_failures, 2);
  EXPECT_EQ(store->stats().dropped_units, 0);
}

// The restart drops the test's connection and the store's, which come back on their own
// reconnect backoff: reads and syncs wait for Redis with a deadline, not a count of attempts,
// and the window is a minute, so the counter's TTL outlasts a slow machine's read.
TEST_F(SyncStoreTest, DeltasOfWindowsOverBeforeRedisReturnsAreDropped) {
  std::unique_ptr<SyncStore> store = NewStore(1, {}, {.connections = 1, .reconnect_max_ms = 50});
  const Limit limit = Window("api", Algorithm::kFixedWindow, 1000, 60 * kSecond);
  EXPECT_EQ(Admit(*store, limit, "k", 10), 10);
  server_->Kill();
  EXPECT_FALSE(store->SyncNow().ok());
  clock_.AdvanceMicros(120 * kSecond);  // two windows later: the 10 belong to no live window
  EXPECT_EQ(Admit(*store, limit, "k", 3), 3);
  ASSERT_TRUE(server_->Restart().ok());
  const absl::Status synced = SyncOnceRedisIsBack(*store);
  ASSERT_TRUE(synced.ok()) << synced;
  EXPECT_EQ(store->stats().dropped_units, 10);
  EXPECT_EQ(RedisCount(limit, "k"), 3);
}

// A store destroyed while a scheduled round waits for its reply runs a last round after it,
// so units checked after the one in flight took its deltas reach Redis too.
TEST_F(SyncStoreTest, ALastRoundAfterTheOneInFlightSendsTheLastDeltas) {
  auto timers = std::make_shared<SimulatedTimers>();
  absl::Notification in_round;
  absl::Notification release;
  std::atomic<int> replies{0};
  SyncStoreOptions options;
  options.clock = &clock_;
  options.instance_count = [] { return int64_t{1}; };
  options.timers = timers;
  sync::SyncStoreTestOptions test;
  test.use_redis_time = false;
  test.before_reply_applied = [&] {
    if (replies.fetch_add(1) > 0) return;
    in_round.Notify();
    release.WaitForNotification();
  };
  absl::StatusOr<std::unique_ptr<SyncStore>> made =
      testing::ConnectSyncStore({.url = server_->url()}, std::move(options), std::move(test));
  ASSERT_TRUE(made.ok()) << made.status();
  std::unique_ptr<SyncStore> store = *std::move(made);
  const Limit limit = Window("api", Algorithm::kFixedWindow, 1000, 60 * kSecond);
  EXPECT_EQ(Admit(*store, limit, "k", 3), 3);
  clock_.AdvanceMicros(kSecond);   // the key is due
  timers->AdvanceMicros(kSecond);  // a scheduled round takes the 3 units
  in_round.WaitForNotification();
  EXPECT_EQ(Admit(*store, limit, "k", 2), 2);
  std::thread closer([&store] { store.reset(); });
  release.Notify();
  closer.join();
  EXPECT_EQ(replies.load(), 2);
  EXPECT_EQ(RedisCount(limit, "k"), 5);
}

TEST(SyncStoreClockTest, CountsIntoRedisTimeWindowsWhateverTheLocalClock) {
  absl::StatusOr<std::unique_ptr<RedisServer>> server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  // This instance's clock is 37 minutes behind; windows are one hour long.
  SimulatedClock skewed(SystemClock().NowMicros() - 37 * 60 * kSecond);
  absl::StatusOr<std::unique_ptr<SyncStore>> store = testing::ConnectSyncStore(
      {.url = (*server)->url()}, {.clock = &skewed}, {.schedule_rounds = false});
  ASSERT_TRUE(store.ok()) << store.status();
  const Limit limit = Window("api", Algorithm::kFixedWindow, 100, 3600 * kSecond);
  ASSERT_TRUE((*store)->Apply({{&limit, "k", 3}}).ok());
  ASSERT_TRUE((*store)->SyncNow().ok());
  EXPECT_NEAR((*store)->stats().clock_offset_micros, 37 * 60 * kSecond, kSecond);

  redis::ClientOptions client_options;
  client_options.connection.url = *redis::ParseRedisUrl((*server)->url());
  auto client = redis::RedisClient::Connect(client_options);
  ASSERT_TRUE(client.ok());
  const int64_t index = algorithm::WindowIndex(SystemClock().NowMicros(), 3600 * kSecond);
  // The real current hour (or, right at an hour boundary, the one before).
  auto now_count = (*client)->Command({"GET", absl::StrCat("tollgate:api:{k}:", index)});
  auto before_count = (*client)->Command({"GET", absl::StrCat("tollgate:api:{k}:", index - 1)});
  ASSERT_TRUE(now_count.ok() && before_count.ok());
  EXPECT_TRUE(now_count->str == "3" || before_count->str == "3")
      << DebugString(*now_count) << " " << DebugString(*before_count);
}

}  // namespace
}  // namespace tollgate
