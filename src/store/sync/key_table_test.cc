// Copyright tollgate authors. Sync mode's request path on a simulated clock, without Redis.
#include "src/store/sync/key_table.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/limits.h"
#include "tollgate/clock.h"

namespace tollgate::sync {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kSecond = 1'000'000;
constexpr int64_t kStart = 1'700'000'000LL * kSecond;  // a 10 s window start

Limit SyncWindow(std::string name, int64_t max, int64_t interval_micros = 100'000) {
  Limit limit = testing::Window(std::move(name), Algorithm::kFixedWindow, max, 10 * kSecond);
  limit.mode = Mode::kSync;
  limit.sync_interval_micros = interval_micros;
  limit.shares = Shares::kEqual;  // first shares of limit / N, unless a test says otherwise
  return limit;
}

class KeyTableTest : public ::testing::Test {
 protected:
  std::unique_ptr<KeyTable> NewTable(KeyTableOptions options = {}) {
    options.clock = &clock_;
    absl::StatusOr<std::unique_ptr<KeyTable>> table = KeyTable::Create(std::move(options));
    EXPECT_TRUE(table.ok()) << table.status();
    return table.ok() ? *std::move(table) : nullptr;
  }

  static int64_t Admit(KeyTable& table, const Limit& limit, const std::string& key, int64_t count) {
    int64_t admitted = 0;
    for (int64_t i = 0; i < count; ++i) {
      absl::StatusOr<std::vector<Decision>> d = table.Check({CheckItem{&limit, key, 1}});
      EXPECT_TRUE(d.ok()) << d.status();
      admitted += d.ok() && (*d)[0].allowed ? 1 : 0;
    }
    return admitted;
  }

  SimulatedClock clock_{kStart};
};

TEST_F(KeyTableTest, RefusesWhatSyncModeCannotDecideNamingTheLimit) {
  std::unique_ptr<KeyTable> table = NewTable();
  const Limit bucket = testing::TokenBucket("bucket", 10, 1);
  EXPECT_THAT(table->Check({CheckItem{&bucket, "k", 1}}).status().message(),
              HasSubstr("\"bucket\""));
  const Limit fast = SyncWindow("fast", 10, /*interval_micros=*/1000);
  EXPECT_THAT(table->Check({CheckItem{&fast, "k", 1}}).status().message(),
              HasSubstr("sync_interval"));
  const Limit fine = SyncWindow("fine", 10);
  EXPECT_EQ(table->Check({CheckItem{&fine, "", 1}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table->Check({}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(KeyTableTest, EveryKeyStartsFromItsFirstShareOfTheLimit) {
  std::unique_ptr<KeyTable> table = NewTable();
  table->SetInstances(4);
  const Limit limit = SyncWindow("api", 103);
  EXPECT_EQ(Admit(*table, limit, "a", 50), 25);
  EXPECT_EQ(Admit(*table, limit, "b", 50), 25);
  // The next window: a fresh first share.
  clock_.AdvanceMicros(10 * kSecond);
  EXPECT_EQ(Admit(*table, limit, "a", 50), 25);
  EXPECT_EQ(table->keys_tracked(), 2);
}

// Windows follow Redis' time (the clock plus the learned offset), intervals the clock alone.
TEST_F(KeyTableTest, WindowsFollowTheClockOffset) {
  std::unique_ptr<KeyTable> table = NewTable();
  const Limit limit = SyncWindow("api", 5);
  EXPECT_EQ(Admit(*table, limit, "k", 10), 5);
  table->SetClockOffset(10 * kSecond);  // Redis is a window ahead of this clock
  EXPECT_EQ(Admit(*table, limit, "k", 10), 5);
}

TEST_F(KeyTableTest, KeysBeyondMaxKeysAreDecidedAtTheirFirstShareAndNeverSynced) {
  std::unique_ptr<KeyTable> table = NewTable({.max_keys = 1});
  table->SetInstances(4);
  const Limit limit = SyncWindow("api", 9);
  EXPECT_EQ(Admit(*table, limit, "tracked", 5), 2);
  EXPECT_EQ(Admit(*table, limit, "overflow", 5), 2);  // floor(9 / 4)
  EXPECT_EQ(table->overflow_decisions(), 5);
  const std::vector<CounterItem> items = table->TakeCounters(/*force=*/true);
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].counter_key, absl::StrCat("tollgate:api:{tracked}:", kStart / (10 * kSecond)));
  // A share below 1 admits nothing: the others hold floor(limit / N) = 0 for this instance.
  table->SetInstances(10);
  EXPECT_EQ(Admit(*table, limit, "small", 3), 0);
  // shares: demand: the floor the others hold for an instance that never reports the key.
  Limit demand = SyncWindow("demand", 1000);
  demand.shares = Shares::kDemand;
  table->SetInstances(4);
  EXPECT_EQ(Admit(*table, demand, "overflow", 50), 25);  // floor(1000 / 40)
}

TEST_F(KeyTableTest, AShorterIntervalIsReportedOnce) {
  std::vector<int64_t> reported;
  std::unique_ptr<KeyTable> table =
      NewTable({.on_shorter_interval = [&](int64_t interval) { reported.push_back(interval); }});
  const Limit slow = SyncWindow("slow", 10, 2 * kSecond);
  const Limit fast = SyncWindow("fast", 10, 50'000);
  ASSERT_EQ(Admit(*table, slow, "k", 1), 1);  // longer than the 1 s start: nothing to report
  ASSERT_EQ(Admit(*table, fast, "k", 1), 1);
  ASSERT_EQ(Admit(*table, fast, "other", 1), 1);
  EXPECT_EQ(reported, std::vector<int64_t>{50'000});
  EXPECT_EQ(table->shortest_interval_micros(), 50'000);
}

TEST_F(KeyTableTest, ARedefinedLimitStartsItsKeysOver) {
  std::unique_ptr<KeyTable> table = NewTable();
  Limit limit = SyncWindow("api", 5);
  EXPECT_EQ(Admit(*table, limit, "k", 10), 5);
  limit.numbers.limit = 8;
  EXPECT_EQ(Admit(*table, limit, "k", 10), 8);
  // So does one whose shares change: demand's first share of 2 instances, floor(100 / 20),
  // from the start.
  table->SetInstances(2);
  limit.numbers.limit = 100;
  EXPECT_EQ(Admit(*table, limit, "k", 10), 10);
  limit.shares = Shares::kDemand;
  EXPECT_EQ(Admit(*table, limit, "k", 20), 5);
  EXPECT_EQ(table->keys_tracked(), 1);
}

TEST_F(KeyTableTest, RoundsTakeDueKeysAndForgetColdOnesOnceTheirWindowIsOver) {
  std::unique_ptr<KeyTable> table = NewTable();
  const Limit limit = SyncWindow("api", 100);
  ASSERT_EQ(Admit(*table, limit, "k", 3), 3);
  EXPECT_TRUE(table->TakeCounters(false).empty());  // not due before its interval
  clock_.AdvanceMicros(100'000);
  std::vector<CounterItem> items = table->TakeCounters(false);
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].delta, 3);
  table->Apply(items, nullptr);
  EXPECT_EQ(table->keys_synced(), 1);
  // Cold (no check for two intervals) with nothing to send: not taken, still tracked.
  clock_.AdvanceMicros(300'000);
  EXPECT_TRUE(table->TakeCounters(false).empty());
  EXPECT_EQ(table->keys_tracked(), 1);
  // Its window over: forgotten.
  clock_.AdvanceMicros(10 * kSecond);
  EXPECT_TRUE(table->TakeCounters(false).empty());
  EXPECT_EQ(table->keys_tracked(), 0);
}

}  // namespace
}  // namespace tollgate::sync
