// Copyright tollgate authors.
//
// Unit tests of the policies with stores that misbehave on purpose (they answer with an
// error, or never). The same behaviour against a real Redis that is killed, paused and
// black-holed is in tests/resilience_test.cc.
#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tollgate/memory_store.h"
#include "tollgate/resilience.h"
#include "tollgate/timers.h"

namespace tollgate {
namespace {

// A store whose answers the test controls: healthy (a memory store), failing, or silent
// (never answers until released, like a black-holed Redis).
class ControlledStore : public Store {
 public:
  enum class Behaviour { kHealthy, kError, kSilent };

  explicit ControlledStore(Clock* clock) { healthy_ = *MemoryStore::Create({.clock = clock}); }
  ~ControlledStore() override { ReleaseSilent(); }

  void set_behaviour(Behaviour behaviour) { behaviour_.store(behaviour); }
  int calls() const { return calls_.load(); }

  void ApplyAsync(std::vector<CheckItem> items, CheckCallback done) override {
    if (!items.empty() && items.front().op == ItemOp::kAdd) {
      Add(items, std::move(done));
      return;
    }
    calls_.fetch_add(1);
    switch (behaviour_.load()) {
      case Behaviour::kHealthy:
        healthy_->ApplyAsync(std::move(items), std::move(done));
        return;
      case Behaviour::kError:
        std::move(done)(absl::UnavailableError("connection refused"));
        return;
      case Behaviour::kSilent: {
        std::lock_guard<std::mutex> lock(mutex_);
        silent_.push_back({std::move(items), std::move(done)});
        return;
      }
    }
  }

  // Answers every silent call now, late: with an error, or (`land`) as the healthy store
  // does, consuming there (a slow Redis whose reply comes after the deadline).
  void ReleaseSilent(bool land = false) {
    std::vector<Silent> silent;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      silent.swap(silent_);
    }
    for (Silent& call : silent) {
      if (land) {
        healthy_->ApplyAsync(std::move(call.items), std::move(call.done));
      } else {
        std::move(call.done)(absl::UnavailableError("late"));
      }
    }
  }

  // Records what is added (reconciliation: kAdd items) and answers that it was applied.
  void Add(const std::vector<CheckItem>& items, CheckCallback done) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const CheckItem& item : items) {
        added_.push_back({item.limit->name, item.key, item.cost, item.at_micros});
      }
    }
    std::move(done)(std::vector<Decision>(items.size(), Decision{.allowed = true}));
  }

  struct Added {
    std::string limit;
    std::string key;
    int64_t cost;
    int64_t at_micros;
  };
  std::vector<Added> added() {
    std::lock_guard<std::mutex> lock(mutex_);
    return added_;
  }

  std::string_view Name() const override { return "controlled"; }

 private:
  std::vector<Added> added_;
  std::unique_ptr<MemoryStore> healthy_;
  std::atomic<Behaviour> behaviour_{Behaviour::kHealthy};
  std::atomic<int> calls_{0};
  std::mutex mutex_;
  struct Silent {
    std::vector<CheckItem> items;
    CheckCallback done;
  };
  std::vector<Silent> silent_;
};

Limit TokenBucket(std::string name, int64_t capacity, double rate, FailureMode mode) {
  Limit limit;
  limit.name = std::move(name);
  limit.numbers.algorithm = Algorithm::kTokenBucket;
  limit.numbers.capacity = capacity;
  limit.numbers.refill_per_second = rate;
  limit.on_store_failure = mode;
  limit.timeout_micros = 20'000;
  return limit;
}

absl::StatusOr<std::vector<Decision>> CheckOne(Store& store, const Limit& limit,
                                               const std::string& key, int64_t cost = 1) {
  std::vector<CheckItem> items;
  items.push_back(CheckItem{&limit, key, cost});
  return store.Apply(std::move(items));
}

class ResilientStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    primary_ = std::make_shared<ControlledStore>(&clock_);
    ResilienceOptions options;
    options.clock = &clock_;
    options.timers = timers_;
    options.breaker = {.failure_threshold = 3, .open_duration_ms = 500};
    options.instance_count = [this] { return instances_.load(); };
    options.on_event = [this](const ResilienceEvent& event) {
      std::lock_guard<std::mutex> lock(events_mutex_);
      events_.push_back(event);
    };
    auto store = ResilientStore::Create(primary_, options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }

  // A call left silent holds the store that holds it: answered, both go.
  void TearDown() override { primary_->ReleaseSilent(); }

  std::vector<ResilienceEvent> events() {
    std::lock_guard<std::mutex> lock(events_mutex_);
    return events_;
  }

  // A check of one item in simulated time: when the store has not answered, the deadline
  // is let pass (the timers advance by the limit's timeout), which must answer it.
  absl::StatusOr<std::vector<Decision>> Check(const Limit& limit, const std::string& key,
                                              int64_t cost = 1) {
    std::optional<absl::StatusOr<std::vector<Decision>>> answer;
    std::vector<CheckItem> items;
    items.push_back(CheckItem{&limit, key, cost});
    store_->ApplyAsync(std::move(items), [&answer](absl::StatusOr<std::vector<Decision>> got) {
      answer = std::move(got);
    });
    if (!answer.has_value()) timers_->AdvanceMicros(limit.timeout_micros);
    EXPECT_TRUE(answer.has_value()) << "not answered at the deadline";
    if (!answer.has_value()) return absl::DeadlineExceededError("unanswered");
    return *std::move(answer);
  }

  // Store::ApplyAsync in simulated time, as Check.
  absl::StatusOr<std::vector<Decision>> Apply(std::vector<CheckItem> items) {
    const int64_t timeout_micros = items.front().limit->timeout_micros;
    std::optional<absl::StatusOr<std::vector<Decision>>> answer;
    store_->ApplyAsync(std::move(items), [&answer](absl::StatusOr<std::vector<Decision>> got) {
      answer = std::move(got);
    });
    if (!answer.has_value()) timers_->AdvanceMicros(timeout_micros);
    EXPECT_TRUE(answer.has_value()) << "not answered at the deadline";
    if (!answer.has_value()) return absl::DeadlineExceededError("unanswered");
    return *std::move(answer);
  }
  static CheckItem Item(const Limit& limit, std::string key, ItemOp op, std::string id) {
    CheckItem item{&limit, std::move(key), 1};
    item.op = op;
    item.id = std::move(id);
    return item;
  }

  // With the breaker open: the store turns healthy and the open time passes; the next check
  // is the probe, answered by the store, and it closes the breaker.
  void ExpectAProbeOfAHealthyStoreCloses() {
    primary_->set_behaviour(ControlledStore::Behaviour::kHealthy);
    clock_.AdvanceMillis(500);
    auto probe = Check(open_, "user:1");
    ASSERT_TRUE(probe.ok());
    EXPECT_EQ((*probe)[0].source, DecisionSource::kMemory);
    EXPECT_EQ(store_->circuit_state(), CircuitState::kClosed);
  }

  SimulatedClock clock_;
  std::shared_ptr<SimulatedTimers> timers_ = std::make_shared<SimulatedTimers>();
  std::mutex events_mutex_;
  std::vector<ResilienceEvent> events_;
  std::atomic<int64_t> instances_{4};
  std::shared_ptr<ControlledStore> primary_;
  std::unique_ptr<ResilientStore> store_;
  Limit open_ = TokenBucket("api", 100, 0.001, FailureMode::kFailOpen);
  Limit closed_ = TokenBucket("otp", 3, 0.001, FailureMode::kFailClosed);
};

TEST_F(ResilientStoreTest, HealthyStoreAnswers) {
  auto decisions = Check(open_, "user:1");
  ASSERT_TRUE(decisions.ok()) << decisions.status();
  EXPECT_TRUE((*decisions)[0].allowed);
  EXPECT_EQ((*decisions)[0].source, DecisionSource::kMemory);  // the wrapped store's answer
  EXPECT_EQ(store_->stats().store_decisions, 1);
}

TEST_F(ResilientStoreTest, FailOpenUsesThisInstancesShare) {
  primary_->set_behaviour(ControlledStore::Behaviour::kError);
  int allowed = 0;
  for (int i = 0; i < 100; ++i) {
    auto decisions = Check(open_, "user:1");
    ASSERT_TRUE(decisions.ok()) << decisions.status();
    EXPECT_EQ((*decisions)[0].source, DecisionSource::kFallback);
    if ((*decisions)[0].allowed) ++allowed;
  }
  EXPECT_EQ(allowed, 100 / 4);  // capacity / N with N = 4
  instances_ = 2;
  auto fresh = Check(open_, "user:2", 0);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ((*fresh)[0].limit, 50);  // the share follows N
}

TEST_F(ResilientStoreTest, FailClosedRefusesWithRetryAfterAndConsumesNothingElse) {
  primary_->set_behaviour(ControlledStore::Behaviour::kError);
  auto decisions = Check(closed_, "phone:1");
  ASSERT_TRUE(decisions.ok());
  EXPECT_FALSE((*decisions)[0].allowed);
  EXPECT_EQ((*decisions)[0].reason, DenyReason::kStoreUnavailable);
  EXPECT_GT((*decisions)[0].retry_after_micros, 0);
  // Its reset is the outage's too, not the bucket's 3000 s refill.
  EXPECT_EQ((*decisions)[0].reset_after_micros, (*decisions)[0].retry_after_micros);

  // A batch with a fail_closed limit is refused whole: the fail_open one spends nothing.
  std::vector<CheckItem> both = {{&open_, "user:9", 5}, {&closed_, "phone:9", 1}};
  auto batch = store_->Apply(both);
  ASSERT_TRUE(batch.ok());
  EXPECT_FALSE((*batch)[1].allowed);
  auto peek = Check(open_, "user:9", 0);
  EXPECT_EQ((*peek)[0].remaining, 25);
}

Limit Concurrency(std::string name, int64_t slots, FailureMode mode) {
  Limit limit = TokenBucket(std::move(name), 1, 1, mode);
  limit.numbers = LimitNumbers{
      .algorithm = Algorithm::kConcurrency, .limit = slots, .window_micros = 60'000'000};
  return limit;
}

// While the store fails, a fail_open concurrency limit holds local slots at this instance's
// share (limit / N, never below 1): a lease taken there is released and renewed there, and
// is never reconciled; a lease of the shared store (unknown here) cannot be released or
// renewed until it answers again (Unavailable, HTTP 503).
TEST_F(ResilientStoreTest, FailOpenLeasesAreLocalSlotsAtThisInstancesShare) {
  primary_->set_behaviour(ControlledStore::Behaviour::kError);
  const Limit slots = Concurrency("slots", 9, FailureMode::kFailOpen);  // 9 / 4 instances: 2
  std::vector<std::string> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(absl::StrCat("lease-", i));
    auto acquired = Apply({Item(slots, "k", ItemOp::kCheck, held.back())});
    ASSERT_TRUE(acquired.ok()) << acquired.status();
    EXPECT_EQ((*acquired)[0].source, DecisionSource::kFallback);
    EXPECT_EQ((*acquired)[0].limit, 2);
    EXPECT_EQ((*acquired)[0].allowed, i < 2) << i;
  }
  auto renewed = Apply({Item(slots, "k", ItemOp::kRenew, held[0])});
  ASSERT_TRUE(renewed.ok()) << renewed.status();
  EXPECT_TRUE((*renewed)[0].allowed);
  auto released = Apply({Item(slots, "k", ItemOp::kRelease, held[1])});
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_TRUE((*released)[0].allowed);
  EXPECT_EQ((*released)[0].remaining, 1);
  EXPECT_TRUE((*Apply({Item(slots, "k", ItemOp::kCheck, "lease-3")}))[0].allowed);

  // The shared store's lease: only it can free it.
  auto shared = Apply({Item(slots, "k", ItemOp::kRelease, "granted-by-the-store")});
  EXPECT_EQ(shared.status().code(), absl::StatusCode::kUnavailable) << shared.status();
  EXPECT_NE(shared.status().message().find("'slots'"), absl::string_view::npos);
  // The share follows N, never below 1; another key has its own slots.
  instances_ = 20;
  auto one = Apply({Item(slots, "other", ItemOp::kCheck, "lease-4")});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_TRUE((*one)[0].allowed);
  EXPECT_EQ((*one)[0].limit, 1);
  EXPECT_FALSE((*Apply({Item(slots, "other", ItemOp::kCheck, "lease-5")}))[0].allowed);
  // Nothing of it is reconciled when the store returns.
  ExpectAProbeOfAHealthyStoreCloses();
  for (const ControlledStore::Added& added : primary_->added()) EXPECT_NE(added.limit, "slots");
}

// on_store_failure: local takes the `local:` block's slots; fail_closed refuses with a retry
// time and takes none, all or nothing with the rest of its batch.
TEST_F(ResilientStoreTest, LocalAndFailClosedLeases) {
  primary_->set_behaviour(ControlledStore::Behaviour::kError);
  Limit local = Concurrency("local_slots", 100, FailureMode::kLocal);
  local.local =
      LimitNumbers{.algorithm = Algorithm::kConcurrency, .limit = 3, .window_micros = 60'000'000};
  int allowed = 0;
  for (int i = 0; i < 5; ++i) {
    auto acquired = Apply({Item(local, "k", ItemOp::kCheck, absl::StrCat("local-", i))});
    ASSERT_TRUE(acquired.ok()) << acquired.status();
    if ((*acquired)[0].allowed) ++allowed;
  }
  EXPECT_EQ(allowed, 3);

  const Limit closed = Concurrency("closed_slots", 100, FailureMode::kFailClosed);
  auto refused = Apply(
      {Item(open_, "user:7", ItemOp::kCheck, ""), Item(closed, "k", ItemOp::kCheck, "closed-1")});
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_FALSE((*refused)[1].allowed);
  EXPECT_EQ((*refused)[1].reason, DenyReason::kStoreUnavailable);
  EXPECT_GT((*refused)[1].retry_after_micros, 0);
  EXPECT_EQ((*Check(open_, "user:7", 0))[0].remaining, 25);  // the batch took nothing
}

TEST_F(ResilientStoreTest, LocalPolicyUsesItsOwnNumbers) {
  Limit local = TokenBucket("sms", 100, 0.001, FailureMode::kLocal);
  local.local =
      LimitNumbers{.algorithm = Algorithm::kTokenBucket, .capacity = 2, .refill_per_second = 0.001};
  primary_->set_behaviour(ControlledStore::Behaviour::kError);
  int allowed = 0;
  for (int i = 0; i < 10; ++i) {
    if ((*Check(local, "phone:1"))[0].allowed) ++allowed;
  }
  EXPECT_EQ(allowed, 2);
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
