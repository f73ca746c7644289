// Copyright tollgate authors. ResilientStore: what the fallback consumed is added to the store
// once it answers (reconciliation), settled by late replies, and bounded.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/resilience/resilient_store_test_util.h"
#include "tollgate/resilience.h"

namespace tollgate {
namespace {

using resilience_test::CheckOne;
using resilience_test::ControlledStore;
using resilience_test::ResilientStoreTest;
using resilience_test::TokenBucket;

TEST_F(ResilientStoreTest, FallbackConsumptionIsAddedBackWhenTheStoreAnswersAgain) {
  primary_->set_behaviour(ControlledStore::Behaviour::kError);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Check(open_, "user:1", 5).ok());
  const int64_t last_at = clock_.NowMicros();
  clock_.AdvanceMillis(100);
  ASSERT_TRUE(Check(open_, "user:2", 2).ok());
  ASSERT_TRUE(Check(open_, "user:3", 0).ok());   // a peek consumes nothing
  ASSERT_TRUE(Check(closed_, "phone:1").ok());   // fail_closed consumes nothing
  ASSERT_TRUE(Check(open_, "user:4", 26).ok());  // refused by the share (25)
  EXPECT_TRUE(primary_->added().empty());        // nothing sent while the store is down

  primary_->set_behaviour(ControlledStore::Behaviour::kHealthy);
  clock_.AdvanceMillis(500);
  ASSERT_TRUE(Check(open_, "user:9", 0).ok());  // the probe closes the breaker
  ASSERT_EQ(store_->circuit_state(), CircuitState::kClosed);

  std::vector<ControlledStore::Added> added = primary_->added();
  std::sort(added.begin(), added.end(), [](const auto& a, const auto& b) { return a.key < b.key; });
  ASSERT_EQ(added.size(), 2u);
  EXPECT_EQ(added[0].limit, "api");
  EXPECT_EQ(added[0].key, "user:1");
  // What the share (25, no refill within the test) still owes now, charged now.
  EXPECT_EQ(added[0].cost, 15);
  EXPECT_EQ(added[0].at_micros, last_at + 600'000);
  EXPECT_EQ(added[1].key, "user:2");
  EXPECT_EQ(added[1].cost, 2);
  EXPECT_EQ(store_->stats().reconciled_items, 2);

  // Sent once: later successes add nothing more.
  ASSERT_TRUE(Check(open_, "user:9", 0).ok());
  EXPECT_EQ(primary_->added().size(), 2u);
}

// Issue 22: a token bucket's fallback consumption is charged as of when it was admitted. A
// user who stayed within its share for the whole outage owes (almost) nothing once the
// store is back; one who drained the share owes what the share misses now, not the sum of
// the outage's consumption.
TEST_F(ResilientStoreTest, TokenBucketConsumptionIsChargedAsOfWhenItWasAdmitted) {
  const Limit api = TokenBucket("api", 40, 20, FailureMode::kFailOpen);  // share: 10, 5/s
  primary_->set_behaviour(ControlledStore::Behaviour::kError);
  int allowed_greedy = 0;
  for (int tick = 0; tick < 120; ++tick) {  // 6 s, every 50 ms
    if (tick % 4 == 0) {
      auto within = Check(api, "user:within");  // 5/s: the share's rate
      ASSERT_TRUE(within.ok());
      EXPECT_TRUE((*within)[0].allowed) << tick;
    }
    auto greedy = Check(api, "user:greedy");  // 20/s: 4x the share
    ASSERT_TRUE(greedy.ok());
    allowed_greedy += (*greedy)[0].allowed ? 1 : 0;
    clock_.AdvanceMillis(50);
  }
  EXPECT_GE(allowed_greedy, 10 + 5 * 6 - 2);  // the share: its capacity, then its refill
  EXPECT_LE(allowed_greedy, 10 + 5 * 6 + 1);

  primary_->set_behaviour(ControlledStore::Behaviour::kHealthy);
  clock_.AdvanceMillis(500);  // the breaker's next probe; 2.5 tokens come back meanwhile
  ASSERT_TRUE(Check(api, "probe", 0).ok());
  ASSERT_EQ(store_->circuit_state(), CircuitState::kClosed);
  std::vector<ControlledStore::Added> added = primary_->added();
  int64_t within = 0, greedy = 0;
  for (const auto& item : added) {
    if (item.key == "user:within") within += item.cost;
    if (item.key == "user:greedy") greedy += item.cost;
    EXPECT_EQ(item.at_micros, clock_.NowMicros());
  }
  // Was: 30, summed and charged as of the last one, a debt of 1.5 s for a user within the
  // limit.
  EXPECT_LE(within, 1);
  // The share was empty 550 ms ago: 10 - 2.75 tokens still owed (was: the capacity, and with
  // 4 instances 4 x the capacity, seconds of refusals after recovery).
  EXPECT_GE(greedy, 7);
  EXPECT_LE(greedy, 8);
  EXPECT_EQ(store_->stats().reconcile_dropped_items, 0);
}

// Issue 29 item 8: a call that missed its deadline but whose reply lands later is settled by
// that reply. Consumed in the store, its fallback admission is not added again; refused or
// failed, it is.
TEST_F(ResilientStoreTest, LateReplySettlesTheFallbackAdmissionOfItsCall) {
  primary_->set_behaviour(ControlledStore::Behaviour::kSilent);
  auto first = Check(open_, "user:landed", 3);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ((*first)[0].source, DecisionSource::kFallback);
  EXPECT_TRUE((*first)[0].allowed);
  primary_->ReleaseSilent(/*land=*/true);  // the late reply consumed 3 in the store
  EXPECT_EQ(store_->stats().late_replies, 1);
  EXPECT_EQ(store_->stats().late_replies_settled, 1);

  auto second = Check(open_, "user:lost", 2);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE((*second)[0].allowed);
  primary_->ReleaseSilent(/*land=*/false);  // the late reply is an error: nothing consumed
  EXPECT_EQ(store_->stats().late_replies_settled, 1);

  primary_->set_behaviour(ControlledStore::Behaviour::kHealthy);
  ASSERT_TRUE(Check(open_, "probe", 0).ok());
  std::vector<ControlledStore::Added> added = primary_->added();
  ASSERT_EQ(added.size(), 1u);
  EXPECT_EQ(added[0].key, "user:lost");
  EXPECT_EQ(added[0].cost, 2);
}

TEST_F(ResilientStoreTest, ReconciliationIsBoundedAndCountsWhatItDrops) {
  ResilienceOptions options;
  options.clock = &clock_;
  options.reconcile_max_entries = 2;
  auto store = ResilientStore::Create(primary_, options);
  ASSERT_TRUE(store.ok());
  primary_->set_behaviour(ControlledStore::Behaviour::kError);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(CheckOne(**store, open_, absl::StrCat("user:", i)).ok());
  ASSERT_TRUE(CheckOne(**store, open_, "user:0").ok());  // an existing entry still grows
  EXPECT_EQ((*store)->stats().reconcile_dropped_items, 3);
  primary_->set_behaviour(ControlledStore::Behaviour::kHealthy);
  clock_.AdvanceMillis(1000);
  ASSERT_TRUE(CheckOne(**store, open_, "user:9", 0).ok());
  EXPECT_EQ((*store)->stats().reconciled_items, 2);
  EXPECT_EQ(primary_->added().size(), 2u);
}

}  // namespace
}  // namespace tollgate
