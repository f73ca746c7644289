// Copyright tollgate authors. What the resilient store's tests share: a store that misbehaves
// on purpose (it answers with an error, or never), and a ResilientStore over it in simulated
// time. The same behaviour against a real Redis that is killed, paused and black-holed is in
// tests/outage_test.cc and tests/redis_failure_test.cc.
#ifndef TOLLGATE_SRC_RESILIENCE_RESILIENT_STORE_TEST_UTIL_H_
#define TOLLGATE_SRC_RESILIENCE_RESILIENT_STORE_TEST_UTIL_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "tollgate/clock.h"
#include "tollgate/memory_store.h"
#include "tollgate/resilience.h"
#include "tollgate/timers.h"

namespace tollgate::resilience_test {

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

inline Limit TokenBucket(std::string name, int64_t capacity, double rate, FailureMode mode) {
  Limit limit;
  limit.name = std::move(name);
  limit.numbers.algorithm = Algorithm::kTokenBucket;
  limit.numbers.capacity = capacity;
  limit.numbers.refill_per_second = rate;
  limit.on_store_failure = mode;
  limit.timeout_micros = 20'000;
  return limit;
}

inline absl::StatusOr<std::vector<Decision>> CheckOne(Store& store, const Limit& limit,
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

}  // namespace tollgate::resilience_test

#endif  // TOLLGATE_SRC_RESILIENCE_RESILIENT_STORE_TEST_UTIL_H_
