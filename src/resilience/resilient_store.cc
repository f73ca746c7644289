// Copyright tollgate authors.
#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "src/core/batch.h"
#include "src/resilience/circuit_breaker.h"
#include "src/resilience/deadline_scheduler.h"
#include "tollgate/memory_store.h"
#include "tollgate/resilience.h"

namespace tollgate {

std::string_view CircuitStateName(CircuitState state) {
  switch (state) {
    case CircuitState::kClosed:
      return "closed";
    case CircuitState::kOpen:
      return "open";
    case CircuitState::kHalfOpen:
      return "half_open";
  }
  return "unknown";
}

namespace resilience {
namespace {

// This instance's share of a limit: numbers / N, never below 1.
LimitNumbers Share(const LimitNumbers& numbers, int64_t instances) {
  LimitNumbers share = numbers;
  if (instances <= 1) return share;
  share.capacity = std::max<int64_t>(1, numbers.capacity / instances);
  share.refill_per_second = numbers.refill_per_second / static_cast<double>(instances);
  share.limit = std::max<int64_t>(1, numbers.limit / instances);
  return share;
}

bool SameNumbers(const LimitNumbers& a, const LimitNumbers& b) {
  return a.algorithm == b.algorithm && a.capacity == b.capacity &&
         a.refill_per_second == b.refill_per_second && a.limit == b.limit &&
         a.window_micros == b.window_micros;
}

// Store round trips, recorded lock-free (relaxed atomics: a snapshot may be mid-update by
// one observation, which Prometheus tolerates).
class RoundTripHistogram {
 public:
  void Observe(int64_t micros) {
    micros = std::max<int64_t>(micros, 0);
    const auto bound = std::lower_bound(kStoreRoundTripBucketsMicros.begin(),
                                        kStoreRoundTripBucketsMicros.end(), micros);
    counts_[bound - kStoreRoundTripBucketsMicros.begin()].fetch_add(1, std::memory_order_relaxed);
    sum_micros_.fetch_add(micros, std::memory_order_relaxed);
  }

  StoreRoundTripHistogram Snapshot() const {
    StoreRoundTripHistogram snapshot;
    for (size_t i = 0; i < counts_.size(); ++i) {
      snapshot.counts[i] = counts_[i].load(std::memory_order_relaxed);
      snapshot.count += snapshot.counts[i];
    }
    snapshot.sum_micros = sum_micros_.load(std::memory_order_relaxed);
    return snapshot;
  }

 private:
  std::array<std::atomic<int64_t>, kStoreRoundTripBucketsMicros.size() + 1> counts_{};
  std::atomic<int64_t> sum_micros_{0};
};

// Reconciliation counters, shared with AddAsync callbacks (which must not keep the Core,
// and so the store, alive).
struct ReconcileCounters {
  std::atomic<int64_t> reconciled{0};
  std::atomic<int64_t> dropped{0};
};

// Fallback consumption of one (limit name, key, window index) not yet added to the store.
// The window index is 0 for a token bucket (one entry per key).
using ReconcileKey = std::tuple<std::string, std::string, int64_t>;
struct Consumption {
  std::shared_ptr<const Limit> limit;  // a copy of the shared limit, kept for AddAsync
  int64_t cost = 0;
  int64_t at_micros = 0;  // the latest consumption recorded in this entry
};

// Everything a pending call needs, kept alive by the call's callbacks.
class Core {
 public:
  Core(std::shared_ptr<Store> primary, ResilienceOptions options,
       std::unique_ptr<MemoryStore> fallback)
      : primary_(std::move(primary)),
        options_(std::move(options)),
        clock_(options_.clock != nullptr ? options_.clock : &SystemClock()),
        breaker_(options_.breaker, clock_),
        fallback_(std::move(fallback)) {}

  Store& primary() { return *primary_; }
  CircuitBreaker& breaker() { return breaker_; }

  // Answers `items` from each limit's failure policy, all or nothing.
  void AnswerFromPolicy(std::vector<CheckItem> items, CheckCallback done) {
    fallback_decisions_.fetch_add(1, std::memory_order_relaxed);
    const int64_t instances =
        options_.instance_count ? std::max<int64_t>(1, options_.instance_count()) : 1;
    bool any_fail_closed = false;
    // Keeps the substituted limits alive until the (inline) memory store has answered.
    std::vector<std::shared_ptr<const Limit>> substitutes;
    substitutes.reserve(items.size());
    for (CheckItem& item : items) {
      if (item.limit->on_store_failure == FailureMode::kFailClosed) any_fail_closed = true;
      substitutes.push_back(FallbackLimit(*item.limit, instances));
    }
    std::vector<CheckItem> local_items;
    local_items.reserve(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      // With a fail_closed limit in the batch nothing may be consumed: the others only peek.
      const int64_t cost = any_fail_closed ? 0 : items[i].cost;
      local_items.push_back(CheckItem{substitutes[i].get(), items[i].key, cost});
      local_items.back().shadow = items[i].shadow;
    }
    fallback_->CheckAsync(
        std::move(local_items), [&](absl::StatusOr<std::vector<Decision>> decisions) {
          if (!decisions.ok()) {
            std::move(done)(decisions.status());
            return;
          }
          if (!any_fail_closed) {
            if (internal::BatchAllowed(items, *decisions)) {
              // What the fallback consumed: a refused shadow item took nothing.
              std::vector<CheckItem> consumed;
              consumed.reserve(items.size());
              for (size_t i = 0; i < items.size(); ++i) {
                if ((*decisions)[i].allowed) consumed.push_back(items[i]);
              }
              Record(consumed);
            }
          }
          for (size_t i = 0; i < decisions->size(); ++i) {
            Decision& decision = (*decisions)[i];
            decision.source = DecisionSource::kFallback;
            if (items[i].limit->on_store_failure == FailureMode::kFailClosed) {
              decision.allowed = false;
              decision.reason = DenyReason::kStoreUnavailable;
              decision.limit = items[i].limit->numbers.MaxCost();
              decision.remaining = 0;
              decision.retry_after_micros = options_.fail_closed_retry_after_ms * 1000;
            }
          }
          std::move(done)(std::move(decisions));
        });
  }

  std::atomic<int64_t> store_decisions_{0};
  std::atomic<int64_t> fallback_decisions_{0};
  std::atomic<int64_t> store_errors_{0};
  std::atomic<int64_t> deadlines_missed_{0};
  std::atomic<int64_t> breaker_rejections_{0};
  std::atomic<int64_t> late_replies_{0};
  RoundTripHistogram round_trips_;
  const std::shared_ptr<ReconcileCounters> reconcile_counters_ =
      std::make_shared<ReconcileCounters>();

  // Called when the store has answered: sends the fallback consumption recorded so far to
  // it with AddAsync, in batches, and forgets it (best effort: a failed batch is counted
  // as dropped, not retried). Cheap when nothing is recorded.
  void Reconcile() {
    if (!has_pending_.load(std::memory_order_acquire)) return;
    absl::flat_hash_map<ReconcileKey, Consumption> pending;
    {
      absl::MutexLock lock(&reconcile_mutex_);
      pending.swap(pending_);
      has_pending_.store(false, std::memory_order_release);
    }
    const size_t batch_size =
        static_cast<size_t>(std::max<int64_t>(1, options_.reconcile_batch_size));
    std::vector<CheckItem> batch;
    std::vector<std::shared_ptr<const Limit>> limits;  // keep batch[i].limit alive
    auto send = [&] {
      if (batch.empty()) return;
      const int64_t count = static_cast<int64_t>(batch.size());
      primary_->AddAsync(std::move(batch),
                         [counters = reconcile_counters_, limits = std::move(limits),
                          count](const absl::Status& status) {
                           (status.ok() ? counters->reconciled : counters->dropped)
                               .fetch_add(count, std::memory_order_relaxed);
                         });
      batch.clear();
      limits.clear();
    };
    for (auto& [key, consumption] : pending) {
      batch.push_back(CheckItem{consumption.limit.get(), std::get<1>(key), consumption.cost,
                                consumption.at_micros});
      limits.push_back(std::move(consumption.limit));
      if (batch.size() >= batch_size) send();
    }
    send();
  }

 private:
  // Records what a fallback answer consumed, for Reconcile.
  void Record(const std::vector<CheckItem>& items) {
    const int64_t now_micros = clock_->NowMicros();
    for (const CheckItem& item : items) {
      if (item.cost <= 0) continue;
      const LimitNumbers& numbers = item.limit->numbers;
      const int64_t window = numbers.algorithm == Algorithm::kTokenBucket
                                 ? 0
                                 : now_micros / std::max<int64_t>(1, numbers.window_micros);
      std::shared_ptr<const Limit> shared = SharedLimit(*item.limit);
      absl::MutexLock lock(&reconcile_mutex_);
      auto it = pending_.find(ReconcileKey(item.limit->name, item.key, window));
      if (it == pending_.end()) {
        if (static_cast<int64_t>(pending_.size()) >= options_.reconcile_max_entries) {
          reconcile_counters_->dropped.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        it =
            pending_.emplace(ReconcileKey(item.limit->name, item.key, window), Consumption{}).first;
      }
      it->second.limit = std::move(shared);
      it->second.cost += item.cost;
      it->second.at_micros = std::max(it->second.at_micros, now_micros);
      has_pending_.store(true, std::memory_order_release);
    }
  }

  // A copy of `limit` that lives as long as the reconciliation needs it (the caller's
  // Limit only lives until its own call is answered).
  std::shared_ptr<const Limit> SharedLimit(const Limit& limit) {
    absl::MutexLock lock(&mutex_);
    std::shared_ptr<const Limit>& cached = shared_limits_[limit.name];
    if (cached == nullptr || !SameNumbers(cached->numbers, limit.numbers)) {
      cached = std::make_shared<Limit>(limit);
    }
    return cached;
  }

  // The limit the local fallback uses for `limit` with `instances` live instances.
  std::shared_ptr<const Limit> FallbackLimit(const Limit& limit, int64_t instances) {
    const LimitNumbers numbers = limit.on_store_failure == FailureMode::kLocal && limit.local
                                     ? *limit.local
                                     : Share(limit.numbers, instances);
    absl::MutexLock lock(&mutex_);
    std::shared_ptr<const Limit>& cached = fallback_limits_[limit.name];
    if (cached == nullptr || cached->numbers.algorithm != numbers.algorithm ||
        cached->numbers.capacity != numbers.capacity ||
        cached->numbers.refill_per_second != numbers.refill_per_second ||
        cached->numbers.limit != numbers.limit ||
        cached->numbers.window_micros != numbers.window_micros) {
      auto substitute = std::make_shared<Limit>(limit);
      substitute->numbers = numbers;
      cached = std::move(substitute);
    }
    return cached;
  }

  std::shared_ptr<Store> primary_;
  const ResilienceOptions options_;
  Clock* const clock_;
  CircuitBreaker breaker_;
  std::unique_ptr<MemoryStore> fallback_;
  absl::Mutex mutex_;
  absl::flat_hash_map<std::string, std::shared_ptr<const Limit>> fallback_limits_
      ABSL_GUARDED_BY(mutex_);
  absl::flat_hash_map<std::string, std::shared_ptr<const Limit>> shared_limits_
      ABSL_GUARDED_BY(mutex_);
  absl::Mutex reconcile_mutex_;
  absl::flat_hash_map<ReconcileKey, Consumption> pending_ ABSL_GUARDED_BY(reconcile_mutex_);
  std::atomic<bool> has_pending_{false};
};

// One call in flight: answered exactly once, by the store or by the deadline.
struct PendingCall {
  std::atomic<bool> answered{false};
  CheckCallback done;
  std::vector<CheckItem> items;  // kept for the fallback answer
  bool probe = false;
};

class ResilientStoreImpl final : public ResilientStore {
 public:
  explicit ResilientStoreImpl(std::shared_ptr<Core> core) : core_(std::move(core)) {}

  void CheckAsync(std::vector<CheckItem> items, CheckCallback done) override {
    const CircuitBreaker::Admission admission = core_->breaker().Admit();
    if (admission == CircuitBreaker::Admission::kReject) {
      core_->breaker_rejections_.fetch_add(1, std::memory_order_relaxed);
      core_->AnswerFromPolicy(std::move(items), std::move(done));
      return;
    }
    int64_t timeout_micros = items.front().limit->timeout_micros;
    for (const CheckItem& item : items) {
      timeout_micros = std::min(timeout_micros, item.limit->timeout_micros);
    }
    auto call = std::make_shared<PendingCall>();
    call->done = std::move(done);
    call->items = items;
    call->probe = admission == CircuitBreaker::Admission::kProbe;

    std::shared_ptr<Core> core = core_;
    const int64_t sent_micros = DeadlineScheduler::MonotonicMicros();
    // Cancelled by the answer: the scheduler wakes only for calls still unanswered.
    scheduler_.Schedule(timeout_micros, &call->answered, [core, call] {
      if (call->answered.exchange(true)) return;
      core->deadlines_missed_.fetch_add(1, std::memory_order_relaxed);
      core->breaker().RecordFailure(call->probe);
      CheckCallback done = std::move(call->done);
      call->done = nullptr;
      core->AnswerFromPolicy(std::move(call->items), std::move(done));
    });
    core->primary().CheckAsync(
        std::move(items),
        [core, call, sent_micros](absl::StatusOr<std::vector<Decision>> decisions) {
          core->round_trips_.Observe(DeadlineScheduler::MonotonicMicros() - sent_micros);
          if (call->answered.exchange(true)) {
            core->late_replies_.fetch_add(1, std::memory_order_relaxed);
            return;
          }
          // Moved out so the caller's callback (and what it owns) dies now,
          // not when the deadline timer lets go of the call.
          CheckCallback done = std::move(call->done);
          call->done = nullptr;
          std::vector<CheckItem> items = std::move(call->items);
          if (decisions.ok()) {
            core->breaker().RecordSuccess(call->probe);
            core->store_decisions_.fetch_add(1, std::memory_order_relaxed);
            // Before answering, so that on one connection the added
            // consumption precedes this caller's next check.
            core->Reconcile();
            std::move(done)(std::move(decisions));
            return;
          }
          core->store_errors_.fetch_add(1, std::memory_order_relaxed);
          core->breaker().RecordFailure(call->probe);
          core->AnswerFromPolicy(std::move(items), std::move(done));
        });
  }

  // Straight to the wrapped store: no deadline (nobody waits on it) and no fallback.
  void AddAsync(std::vector<CheckItem> items, AddCallback done) override {
    core_->primary().AddAsync(std::move(items), std::move(done));
  }

  std::string_view Name() const override { return core_->primary().Name(); }

  CircuitState circuit_state() const override { return core_->breaker().state(); }

  ResilienceStats stats() const override {
    ResilienceStats stats;
    stats.store_decisions = core_->store_decisions_.load();
    stats.fallback_decisions = core_->fallback_decisions_.load();
    stats.store_errors = core_->store_errors_.load();
    stats.deadlines_missed = core_->deadlines_missed_.load();
    stats.breaker_rejections = core_->breaker_rejections_.load();
    stats.late_replies = core_->late_replies_.load();
    stats.reconciled_items = core_->reconcile_counters_->reconciled.load();
    stats.reconcile_dropped_items = core_->reconcile_counters_->dropped.load();
    return stats;
  }

  StoreRoundTripHistogram store_round_trips() const override {
    return core_->round_trips_.Snapshot();
  }

 private:
  std::shared_ptr<Core> core_;
  // Declared after core_, so destroyed first: it answers every pending deadline at once
  // and joins. Its callbacks own the Core they use, never the scheduler.
  DeadlineScheduler scheduler_;
};

}  // namespace
}  // namespace resilience

absl::StatusOr<std::unique_ptr<ResilientStore>> ResilientStore::Create(
    std::shared_ptr<Store> primary, ResilienceOptions options) {
  if (primary == nullptr) return absl::InvalidArgumentError("ResilientStore needs a store");
  if (options.breaker.failure_threshold < 1) {
    return absl::InvalidArgumentError("circuit breaker failure_threshold must be >= 1");
  }
  if (options.reconcile_max_entries < 0 || options.reconcile_batch_size < 1) {
    return absl::InvalidArgumentError(
        "reconcile_max_entries must be >= 0 and reconcile_batch_size >= 1");
  }
  if (options.breaker.open_duration_ms < 1) {
    return absl::InvalidArgumentError("circuit breaker open_duration_ms must be >= 1");
  }
  MemoryStoreOptions memory_options;
  memory_options.clock = options.clock;
  memory_options.max_keys = options.fallback_max_keys;
  absl::StatusOr<std::unique_ptr<MemoryStore>> fallback = MemoryStore::Create(memory_options);
  if (!fallback.ok()) return fallback.status();
  auto core = std::make_shared<resilience::Core>(std::move(primary), std::move(options),
                                                 std::move(*fallback));
  return std::unique_ptr<ResilientStore>(new resilience::ResilientStoreImpl(std::move(core)));
}

}  // namespace tollgate
