// Copyright tollgate authors. ResilientStore: each call within its limits' deadline, the
// circuit breaker, and the failure policies when the store cannot answer. The parts it joins:
// fallback_policy.h (the answers from on_store_failure), late_replies.h (what a late reply
// settles), reconciler.h (what the fallback consumed, added to the store once it answers),
// demand_shares.h (fail_open's demand-weighted shares).
#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "src/core/deadline_scheduler.h"
#include "src/resilience/circuit_breaker.h"
#include "src/resilience/demand_shares.h"
#include "src/resilience/fallback_policy.h"
#include "src/resilience/late_replies.h"
#include "src/resilience/reconciler.h"
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

std::string_view ResilienceEventName(ResilienceEvent::Kind kind) {
  switch (kind) {
    case ResilienceEvent::Kind::kStoreUnreachable:
      return "store_unreachable";
    case ResilienceEvent::Kind::kStoreReachable:
      return "store_reachable";
    case ResilienceEvent::Kind::kBreakerOpened:
      return "breaker_opened";
    case ResilienceEvent::Kind::kBreakerClosed:
      return "breaker_closed";
    case ResilienceEvent::Kind::kFallbackStarted:
      return "fallback_started";
    case ResilienceEvent::Kind::kFallbackEnded:
      return "fallback_ended";
    case ResilienceEvent::Kind::kReconciled:
      return "reconciled";
    case ResilienceEvent::Kind::kInstanceCountChanged:
      return "instance_count_changed";
    case ResilienceEvent::Kind::kReplicasNotConfirming:
      return "replicas_not_confirming";
    case ResilienceEvent::Kind::kReplicasConfirming:
      return "replicas_confirming";
  }
  return "unknown";
}

namespace resilience {
namespace {

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

// What the store's calls share, kept alive by each call's callbacks: the breaker, the
// fallback, what is left to reconcile, and the counts.
class Core {
 public:
  Core(std::shared_ptr<Store> primary, ResilienceOptions options,
       std::unique_ptr<MemoryStore> fallback)
      : primary_(std::move(primary)),
        options_(std::move(options)),
        clock_(options_.clock != nullptr ? options_.clock : &SystemClock()),
        breaker_(options_.breaker, clock_),
        shares_(options_.fallback_shares),
        fallback_(std::move(fallback), shares_, options_.fail_closed_retry_after_ms),
        reconciler_(clock_, options_.reconcile_max_entries, options_.reconcile_batch_size,
                    options_.on_event),
        late_replies_(clock_, reconciler_) {}

  Store& primary() { return *primary_; }
  CircuitBreaker& breaker() { return breaker_; }
  Reconciler& reconciler() { return reconciler_; }
  LateReplies& late_replies() { return late_replies_; }

  void Emit(ResilienceEvent::Kind kind, int64_t count = 0, std::string detail = "") {
    if (!options_.on_event) return;
    ResilienceEvent event;
    event.kind = kind;
    event.count = count;
    event.detail = std::move(detail);
    options_.on_event(event);
  }

  void RecordFailure(bool probe, std::string_view why) {
    if (breaker_.RecordFailure(probe)) {
      Emit(ResilienceEvent::Kind::kBreakerOpened, options_.breaker.failure_threshold,
           std::string(why));
    }
  }

  // The store answered: closes the breaker, ends a fallback episode and reconciles.
  void RecordSuccess(bool probe) {
    if (breaker_.RecordSuccess(probe)) Emit(ResilienceEvent::Kind::kBreakerClosed);
    if (in_fallback_.load(std::memory_order_relaxed) && in_fallback_.exchange(false)) {
      Emit(ResilienceEvent::Kind::kFallbackEnded, episode_decisions_.exchange(0));
    }
    reconciler_.Reconcile(*primary_);
  }

  // Answers `items` from each limit's failure policy (FallbackPolicy). `hold`: the call whose
  // store request is still out (the deadline passed), whose reply settles what is admitted;
  // nullptr: nothing is out, what is admitted is recorded at once (LateReplies).
  // `store_counted`: the store answered and counted the call, but no replica confirmed it
  // (UnconfirmedWriteError): not an episode of the store's absence, and nothing the fallback
  // admits is reconciled into the store.
  void AnswerFromPolicy(std::vector<CheckItem> items, CheckCallback done,
                        const std::shared_ptr<PendingCall>& hold = nullptr,
                        bool store_counted = false) {
    fallback_decisions_.fetch_add(1, std::memory_order_relaxed);
    const int64_t instances =
        options_.instance_count ? std::max<int64_t>(1, options_.instance_count()) : 1;
    if (!store_counted) {
      episode_decisions_.fetch_add(1, std::memory_order_relaxed);
      if (!in_fallback_.load(std::memory_order_relaxed) && !in_fallback_.exchange(true)) {
        Emit(ResilienceEvent::Kind::kFallbackStarted, instances, shares_.InUse(instances));
      }
    }
    fallback_.Answer(
        std::move(items), instances,
        [&](const std::vector<CheckItem>& consumed) {
          if (!store_counted) late_replies_.Admit(consumed, instances, hold);
        },
        std::move(done));
  }

  // The store answered but a durable limit's replica did not confirm: the breaker, which
  // guards every limit, counts an answer.
  void RecordUnconfirmed(bool probe) {
    if (breaker_.RecordSuccess(probe)) Emit(ResilienceEvent::Kind::kBreakerClosed);
  }

  // Counts the demand of `items` for fail_open's demand-weighted shares.
  void CountDemand(const std::vector<CheckItem>& items) { shares_.Count(items); }

  std::atomic<int64_t> store_decisions_{0};
  std::atomic<int64_t> fallback_decisions_{0};
  std::atomic<int64_t> store_errors_{0};
  std::atomic<int64_t> deadlines_missed_{0};
  std::atomic<int64_t> breaker_rejections_{0};
  RoundTripHistogram round_trips_;

 private:
  std::shared_ptr<Store> primary_;
  const ResilienceOptions options_;
  Clock* const clock_;
  CircuitBreaker breaker_;
  const DemandShares shares_;
  FallbackPolicy fallback_;
  Reconciler reconciler_;
  LateReplies late_replies_;
  std::atomic<bool> in_fallback_{false};
  std::atomic<int64_t> episode_decisions_{0};
};

class ResilientStoreImpl final : public ResilientStore {
 public:
  ResilientStoreImpl(std::shared_ptr<Core> core, std::shared_ptr<Timers> timers)
      : core_(std::move(core)), timers_(std::move(timers)) {}

  void ApplyAsync(std::vector<CheckItem> items, CheckCallback done) override {
    if (!items.empty() && items.front().op == ItemOp::kAdd) {
      // Straight to the wrapped store: no deadline (nobody waits on it) and no fallback.
      core_->primary().ApplyAsync(std::move(items), std::move(done));
      return;
    }
    Send(std::move(items), std::move(done));
  }

 private:
  // ApplyAsync on the wrapped store, within the deadline.
  void Send(std::vector<CheckItem> items, CheckCallback done) {
    core_->CountDemand(items);
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
    if (std::any_of(items.begin(), items.end(),
                    [](const CheckItem& item) { return item.op != ItemOp::kCheck; })) {
      call->ops.reserve(items.size());
      for (const CheckItem& item : items) call->ops.push_back(item.op);
    }

    std::shared_ptr<Core> core = core_;
    const int64_t sent_micros = internal::DeadlineScheduler::MonotonicMicros();
    // Cancelled by the answer: the timers wake only for calls still unanswered. The entry
    // holds the core weakly: a timer queue that outlives the store (loop timers drop theirs
    // when the loop is destroyed) must not keep the Redis store alive past its loops. While
    // the primary still owes an answer its callback holds the core, so an expired core
    // means the call was answered.
    timers_->RunAfter(timeout_micros, &call->answered,
                      [weak_core = std::weak_ptr<Core>(core), call] {
                        std::shared_ptr<Core> core = weak_core.lock();
                        if (core == nullptr || call->answered.exchange(true)) return;
                        core->deadlines_missed_.fetch_add(1, std::memory_order_relaxed);
                        core->RecordFailure(call->probe, "deadline missed");
                        CheckCallback done = std::move(call->done);
                        call->done = nullptr;
                        core->AnswerFromPolicy(std::move(call->items), std::move(done), call);
                      });
    auto on_reply = [core, call, sent_micros](absl::StatusOr<std::vector<Decision>> decisions) {
      core->round_trips_.Observe(internal::DeadlineScheduler::MonotonicMicros() - sent_micros);
      if (call->answered.exchange(true)) {
        core->late_replies().Settle(*call, decisions);
        return;
      }
      // Moved out so the caller's callback (and what it owns) dies now,
      // not when the deadline timer lets go of the call.
      CheckCallback done = std::move(call->done);
      call->done = nullptr;
      std::vector<CheckItem> items = std::move(call->items);
      if (decisions.ok()) {
        core->store_decisions_.fetch_add(1, std::memory_order_relaxed);
        // Reconciles before answering, so that on one connection the added
        // consumption precedes this caller's next check.
        core->RecordSuccess(call->probe);
        std::move(done)(std::move(decisions));
        return;
      }
      if (IsUnconfirmedWrite(decisions.status())) {
        // The store is up; a durable limit's replica did not confirm: its policy answers.
        core->RecordUnconfirmed(call->probe);
        core->AnswerFromPolicy(std::move(items), std::move(done), nullptr,
                               /*store_counted=*/true);
        return;
      }
      core->store_errors_.fetch_add(1, std::memory_order_relaxed);
      core->RecordFailure(call->probe, std::string(decisions.status().message()));
      core->AnswerFromPolicy(std::move(items), std::move(done));
    };
    core->primary().ApplyAsync(std::move(items), std::move(on_reply));
  }

 public:
  std::string_view Name() const override { return core_->primary().Name(); }

  CircuitState circuit_state() const override { return core_->breaker().state(); }

  ResilienceStats stats() const override {
    ResilienceStats stats;
    stats.store_decisions = core_->store_decisions_.load();
    stats.fallback_decisions = core_->fallback_decisions_.load();
    stats.store_errors = core_->store_errors_.load();
    stats.deadlines_missed = core_->deadlines_missed_.load();
    stats.breaker_rejections = core_->breaker_rejections_.load();
    stats.late_replies = core_->late_replies().late_replies();
    stats.late_replies_settled = core_->late_replies().settled();
    stats.reconciled_items = core_->reconciler().reconciled();
    stats.reconcile_dropped_items = core_->reconciler().dropped();
    return stats;
  }

  StoreRoundTripHistogram store_round_trips() const override {
    return core_->round_trips_.Snapshot();
  }

 private:
  std::shared_ptr<Core> core_;
  // Declared after core_, so released first (ThreadTimers, when this store owns them,
  // answer every pending deadline at once and join). Their callbacks own the Core they
  // use; the Core never owns the timers.
  std::shared_ptr<Timers> timers_;
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
  std::shared_ptr<Timers> timers =
      options.timers != nullptr ? std::move(options.timers) : ThreadTimers();
  options.timers = nullptr;
  auto core = std::make_shared<resilience::Core>(std::move(primary), std::move(options),
                                                 std::move(*fallback));
  return std::unique_ptr<ResilientStore>(
      new resilience::ResilientStoreImpl(std::move(core), std::move(timers)));
}

}  // namespace tollgate
