// Copyright tollgate authors. ResilientStore: answers in time, deadlines, the circuit breaker and
// its events, with stores that misbehave on purpose.
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "src/resilience/resilient_store_test_util.h"
#include "tollgate/resilience.h"

namespace tollgate {
namespace {

using resilience_test::ControlledStore;
using resilience_test::ResilientStoreTest;

TEST_F(ResilientStoreTest, HealthyStoreAnswers) {
  auto decisions = Check(open_, "user:1");
  ASSERT_TRUE(decisions.ok()) << decisions.status();
  EXPECT_TRUE((*decisions)[0].allowed);
  EXPECT_EQ((*decisions)[0].source, DecisionSource::kMemory);  // the wrapped store's answer
  EXPECT_EQ(store_->stats().store_decisions, 1);
}

TEST_F(ResilientStoreTest, SilentStoreIsAnsweredAtTheDeadlineAndLateRepliesAreDropped) {
  primary_->set_behaviour(ControlledStore::Behaviour::kSilent);
  int answers = 0;
  std::optional<absl::StatusOr<std::vector<Decision>>> answer;
  std::vector<CheckItem> items;
  items.push_back(CheckItem{&open_, "user:1", 1});
  store_->ApplyAsync(std::move(items), [&](absl::StatusOr<std::vector<Decision>> got) {
    ++answers;
    answer = std::move(got);
  });
  timers_->AdvanceMicros(open_.timeout_micros - 1);
  EXPECT_EQ(answers, 0);  // the caller waits for the store until the deadline
  timers_->AdvanceMicros(1);
  ASSERT_EQ(answers, 1);
  ASSERT_TRUE(answer->ok());
  EXPECT_EQ((**answer)[0].source, DecisionSource::kFallback);
  EXPECT_TRUE((**answer)[0].allowed);
  EXPECT_EQ(store_->stats().deadlines_missed, 1);
  primary_->ReleaseSilent();  // the late reply must not answer the caller a second time
  EXPECT_EQ(answers, 1);
  EXPECT_EQ(store_->stats().late_replies, 1);
}

// The deadline is the smallest timeout of a batch's limits.
TEST_F(ResilientStoreTest, ABatchWaitsForItsShortestTimeout) {
  Limit slow = open_;
  slow.name = "slow";
  slow.timeout_micros = 200'000;
  primary_->set_behaviour(ControlledStore::Behaviour::kSilent);
  int answers = 0;
  std::vector<CheckItem> items;
  items.push_back(CheckItem{&slow, "user:1", 1});
  items.push_back(CheckItem{&open_, "user:1", 1});  // 20 ms
  store_->ApplyAsync(std::move(items), [&](const absl::StatusOr<std::vector<Decision>>& got) {
    ++answers;
    EXPECT_TRUE(got.ok());
  });
  timers_->AdvanceMicros(open_.timeout_micros);
  EXPECT_EQ(answers, 1);
}

// A store that answers in time cancels its deadline: nothing runs when it would have
// passed, and the breaker never hears of it.
TEST_F(ResilientStoreTest, AnAnswerInTimeCancelsTheDeadline) {
  primary_->set_behaviour(ControlledStore::Behaviour::kSilent);
  int answers = 0;
  std::vector<CheckItem> items;
  items.push_back(CheckItem{&open_, "user:1", 1});
  store_->ApplyAsync(std::move(items), [&](absl::StatusOr<std::vector<Decision>> got) {
    ++answers;
    ASSERT_TRUE(got.ok());
    EXPECT_EQ((*got)[0].source, DecisionSource::kMemory);
  });
  timers_->AdvanceMicros(open_.timeout_micros / 2);
  primary_->ReleaseSilent(/*land=*/true);
  EXPECT_EQ(answers, 1);
  timers_->AdvanceMicros(open_.timeout_micros);
  EXPECT_EQ(answers, 1);
  EXPECT_EQ(store_->stats().deadlines_missed, 0);
  EXPECT_EQ(store_->stats().late_replies, 0);
  EXPECT_EQ(timers_->pending(), 0);
}

// Missed deadlines open the breaker like errors do: after failure_threshold of them the
// store is not asked again until the open duration has passed (the limits' clock).
TEST_F(ResilientStoreTest, MissedDeadlinesOpenTheBreaker) {
  primary_->set_behaviour(ControlledStore::Behaviour::kSilent);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Check(open_, "user:1").ok());
  EXPECT_EQ(store_->stats().deadlines_missed, 3);
  EXPECT_EQ(store_->circuit_state(), CircuitState::kOpen);
  const int calls = primary_->calls();
  auto rejected = Check(open_, "user:1");  // answered at once, no deadline to wait
  ASSERT_TRUE(rejected.ok());
  EXPECT_EQ((*rejected)[0].source, DecisionSource::kFallback);
  EXPECT_EQ(primary_->calls(), calls);
  EXPECT_EQ(timers_->pending(), 0);
  primary_->ReleaseSilent(/*land=*/true);
  ExpectAProbeOfAHealthyStoreCloses();
}

TEST_F(ResilientStoreTest, BreakerOpensThenProbesAndCloses) {
  primary_->set_behaviour(ControlledStore::Behaviour::kError);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Check(open_, "user:1").ok());
  EXPECT_EQ(store_->circuit_state(), CircuitState::kOpen);
  const int calls_when_open = primary_->calls();
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(Check(open_, "user:1").ok());
  EXPECT_EQ(primary_->calls(), calls_when_open);  // no waiting on the store while open
  EXPECT_EQ(store_->stats().breaker_rejections, 50);

  ExpectAProbeOfAHealthyStoreCloses();
}

TEST_F(ResilientStoreTest, StateChangesAreReportedOncePerChange) {
  primary_->set_behaviour(ControlledStore::Behaviour::kError);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(Check(open_, "user:1").ok());
  primary_->set_behaviour(ControlledStore::Behaviour::kHealthy);
  clock_.AdvanceMillis(500);
  ASSERT_TRUE(Check(open_, "user:2").ok());
  ASSERT_TRUE(Check(open_, "user:2").ok());

  using Kind = ResilienceEvent::Kind;
  std::vector<ResilienceEvent> seen = events();
  std::vector<Kind> kinds;
  for (const ResilienceEvent& event : seen) kinds.push_back(event.kind);
  EXPECT_EQ(kinds,
            (std::vector<Kind>{Kind::kFallbackStarted, Kind::kBreakerOpened, Kind::kBreakerClosed,
                               Kind::kFallbackEnded, Kind::kReconciled}));
  ASSERT_EQ(seen.size(), 5u);
  EXPECT_EQ(seen[1].detail, "connection refused");
  EXPECT_EQ(seen[3].count, 10);  // fallback decisions in the episode
  EXPECT_EQ(seen[4].count, 1);   // one key reconciled
  EXPECT_EQ(seen[4].dropped, 0);
}

}  // namespace
}  // namespace tollgate
